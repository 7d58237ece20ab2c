"""Verification across execution classes: false failures on honest units, detection of each
cheat, what a verifier spends against what the provider spent, and the separation margin.

Honest units are trained by a provider in one CPU class of verifier.casebook.HOSTS and judged
by a verifier in another (verifier.trajectory.judge, with the shipped tolerance), over the
casebook's specs, seeds and slots; each cheat of verifier.casebook.CHEATS is committed for
sampled units and judged the same way. The exact same-class check is timed on a few units too.

    python scripts/bench_verification.py                # a quick run (24 honest units)
    python scripts/bench_verification.py --units 240    # the full figure
"""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Any

from benchkit import Bench

from marketplace.protocol.checkpoint import Checkpoint
from node.engine import Shard, run_unit
from verifier import casebook
from verifier.trajectory import Judgement, Tolerance, judge

TARGETS = {
    "false_failure_ratio": "<= 0",
    "exact_cost_ratio": "<= 1.1",
    "tolerant_cost_ratio": "<= 2.0",
} | {f"{cheat}_detection_ratio": ">= 0.99" for cheat in casebook.CHEATS}


def cases() -> itertools.cycle[tuple[str, int, int, str, str]]:
    """(spec, seed, slot, provider class, verifier class), cycling so classes always differ."""
    names = list(casebook.HOSTS)
    pairs = [(a, b) for a, b in itertools.permutations(names, 2)]
    return itertools.cycle(
        (spec, seed, seed % 3, *pairs[(seed + i) % len(pairs)])
        for seed in range(1_000)
        for i, spec in enumerate(casebook.SPECS)
    )


def judged(
    spec: Any,
    start: Checkpoint | None,
    shard: Shard,
    committed: casebook.Committed,
    verifier: str,
    tolerance: Tolerance,
) -> tuple[Judgement, float]:
    """The verdict, and the verifier's CPU seconds."""
    checkpoint, states = committed
    began = time.process_time()
    verdict = judge(
        spec,
        start,
        checkpoint,
        shard,
        spec.checkpoint.every,
        lambda segment: states.get(segment["state_hash"]),
        tolerance,
        host=casebook.HOSTS[verifier],
    )
    return verdict, time.process_time() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=24, help="honest cross-class units")
    parser.add_argument("--cheat-units", type=int, default=6, help="sampled units per cheat")
    parser.add_argument("--exact-units", type=int, default=4, help="units timed same-class")
    args = parser.parse_args()
    tolerance = Tolerance.load()
    bench = Bench("verification", TARGETS)

    honest_share: list[float] = []  # each honest unit's deciding distance over its bound
    false_failures = 0
    train_s = verify_s = 0.0
    starts: dict[tuple[str, int, str], tuple[Any, Checkpoint, Shard]] = {}
    source = cases()
    for done in range(args.units):
        name, seed, slot, provider, verifier = next(source)
        spec = casebook.spec(name, seed=seed)
        shard = Shard.of(spec, slot, 0, spec.training.max_steps)
        every = spec.checkpoint.every
        # alternate units from the seed and units one checkpoint in
        start = None
        if done % 2:
            key = (name, seed, provider)
            if key not in starts:
                first = run_unit(spec, None, shard, every, device="cpu")
                starts[key] = (spec, first.checkpoint, shard)
            start = starts[key][1]
        began = time.process_time()
        committed = casebook.honest(spec, start, shard, every, casebook.HOSTS[provider])
        train_s += time.process_time() - began
        verdict, seconds = judged(spec, start, shard, committed, verifier, tolerance)
        verify_s += seconds
        honest_share.append(verdict.decisive)
        if not verdict.passed:
            false_failures += 1
            print(f"FALSE FAILURE {name} seed {seed} {provider}->{verifier}: {verdict.reason}")

    detection: dict[str, float] = {}
    cheat_share: dict[str, float] = {}
    for cheat, make in casebook.CHEATS.items():
        caught, shares = 0, []
        for i in range(args.cheat_units):
            name, seed, slot, provider, verifier = next(source)
            spec = casebook.spec(name, seed=500 + i)
            shard = Shard.of(spec, slot, 0, spec.training.max_steps)
            start = None
            if i % 2:
                start = run_unit(spec, None, shard, spec.checkpoint.every, device="cpu").checkpoint
            committed = make(spec, start, shard, spec.checkpoint.every, casebook.HOSTS[provider])
            verdict, _ = judged(spec, start, shard, committed, verifier, tolerance)
            caught += verdict.passed is False
            if verdict.decisive > 0:  # not refused on structure alone
                shares.append(verdict.decisive)
        detection[cheat] = caught / args.cheat_units
        cheat_share[cheat] = min(shares) if shares else float("inf")

    exact_ratios = []
    for i in range(args.exact_units):
        spec = casebook.spec(list(casebook.SPECS)[i % len(casebook.SPECS)], seed=900 + i)
        shard = Shard.of(spec, 0, 0, spec.training.max_steps)
        host = casebook.HOSTS["t1"]
        began = time.process_time()
        a = run_unit(spec, None, shard, spec.checkpoint.every, device="cpu", host=host)
        trained = time.process_time() - began
        b = run_unit(spec, None, shard, spec.checkpoint.every, device="cpu", host=host)
        exact_ratios.append((time.process_time() - began - trained) / trained)
        if a.state_hash != b.state_hash:
            raise SystemExit("the same class did not reproduce a unit bit for bit")

    largest_honest = max(honest_share, default=0.0)
    distance_cheats = [s for s in cheat_share.values() if s != float("inf")]
    figures = {
        "honest_units": args.units,
        "false_failures": false_failures,
        "false_failure_ratio": false_failures / args.units,
        "tolerant_cost_ratio": verify_s / train_s,
        "exact_cost_ratio": sorted(exact_ratios)[len(exact_ratios) // 2],
        "largest_honest_share_of_bound": largest_honest,
        "smallest_cheat_share_of_bound": min(distance_cheats, default=float("inf")),
        "separation_margin_ratio": min(distance_cheats, default=float("inf"))
        / max(largest_honest, 1e-12),
        "cheat_units_each": args.cheat_units,
    }
    for cheat in casebook.CHEATS:
        figures[f"{cheat}_detection_ratio"] = detection[cheat]
        if cheat_share[cheat] != float("inf"):
            figures[f"{cheat}_share_of_bound"] = cheat_share[cheat]
    bench.record(figures)
    bench.report("Verification across execution classes (CPU stand-ins)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

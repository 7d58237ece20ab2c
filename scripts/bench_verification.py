"""Verification across execution classes: false failures on honest units, detection of each
cheat, what a verifier spends against what the provider spent, and the separation margin.

Honest units are trained by a provider in one CPU class of verifier.casebook.HOSTS and judged
by a verifier in another (verifier.trajectory.judge, with the shipped tolerance), over the
casebook's specs, seeds and slots; each cheat of verifier.casebook.CHEATS is committed for
sampled units and judged the same way. The exact same-class check is timed on a few units too.
With --cuda, providers (honest and cheating) train on the GPU in casebook.CUDA_HOSTS' class and
CPU verifiers judge them; the exact check re-runs on the GPU. With --dropout, every spec trains
with that dropout (hashed masks, node/engine/dropout.py), judged by the same table.

    python scripts/bench_verification.py                # a quick run (24 honest units)
    python scripts/bench_verification.py --units 240    # the full figure
    python scripts/bench_verification.py --cuda --units 96   # GPU providers (needs a GPU)
    python scripts/bench_verification.py --cuda --dropout 0.1   # GPU providers, with dropout
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from typing import Any

import torch
from benchkit import Bench

from marketplace.protocol.checkpoint import Checkpoint
from node.engine import Shard, run_unit
from node.engine.environment import Host
from verifier import casebook
from verifier.trajectory import Judgement, Tolerance, judge

TARGETS = {
    "false_failure_ratio": "<= 0",
    "exact_reproduced_ratio": ">= 1",
    "exact_cost_ratio": "<= 1.1",
    "tolerant_cost_ratio": "<= 2.0",
} | {f"{cheat}_detection_ratio": ">= 0.99" for cheat in casebook.CHEATS}


def cases(
    providers: list[str], verifiers: list[str]
) -> itertools.cycle[tuple[str, int, int, str, str]]:
    """(spec, seed, slot, provider class, verifier class), cycling so classes always differ."""
    pairs = [(a, b) for a, b in itertools.product(providers, verifiers) if a != b]
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
        device=casebook.device_of(verifier),
        host=_host(verifier),
    )
    return verdict, time.process_time() - began


def _host(name: str) -> Host:
    return (casebook.HOSTS | casebook.CUDA_HOSTS)[name]


def _train(spec: Any, start: Checkpoint | None, shard: Shard, name: str) -> Any:
    """A unit of `spec` from `start` in class `name`, as a provider trains it."""
    every = spec.checkpoint.every
    return run_unit(spec, start, shard, every, device=casebook.device_of(name), host=_host(name))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=24, help="honest cross-class units")
    parser.add_argument("--cheat-units", type=int, default=6, help="sampled units per cheat")
    parser.add_argument("--exact-units", type=int, default=4, help="units timed same-class")
    parser.add_argument("--cuda", action="store_true", help="providers train on the GPU")
    parser.add_argument("--dropout", type=float, default=0.0, help="every spec's dropout")
    args = parser.parse_args()
    if args.cuda and not torch.cuda.is_available():
        raise SystemExit("--cuda needs a CUDA device; none is here")
    tolerance = Tolerance.load()
    providers = list(casebook.CUDA_HOSTS if args.cuda else casebook.HOSTS)
    # on the GPU the provider's CPU seconds are not its cost: the cost ratios are CPU-only figures
    targets = {k: v for k, v in TARGETS.items() if not (args.cuda and "cost" in k)}
    name = "verification" + ("-cuda" if args.cuda else "") + ("-dropout" if args.dropout else "")
    bench = Bench(name, targets)

    honest_share: list[float] = []  # each honest unit's deciding distance over its bound
    false_failures = 0
    train_s = verify_s = 0.0
    starts: dict[tuple[str, int, str], Checkpoint] = {}
    source = cases(providers, list(casebook.HOSTS))
    for done in range(args.units):
        name, seed, slot, provider, verifier = next(source)
        spec = casebook.spec(name, seed=seed, dropout=args.dropout)
        shard = Shard.of(spec, slot, 0, spec.training.max_steps)
        # alternate units from the seed and units one checkpoint in
        start = None
        if done % 2:
            key = (name, seed, provider)
            if key not in starts:
                starts[key] = _train(spec, None, shard, provider).checkpoint
            start = starts[key]
        began = time.process_time()
        committed = casebook.honest(
            spec, start, shard, spec.checkpoint.every, _host(provider), casebook.device_of(provider)
        )
        train_s += time.process_time() - began
        verdict, seconds = judged(spec, start, shard, committed, verifier, tolerance)
        verify_s += seconds
        honest_share.append(verdict.decisive)
        if not verdict.passed:
            false_failures += 1
            print(f"FALSE FAILURE {name} seed {seed} {provider}->{verifier}: {verdict.reason}")
        if (done + 1) % max(1, args.units // 10) == 0:
            print(f"honest units judged: {done + 1} of {args.units}", file=sys.stderr, flush=True)

    detection: dict[str, float] = {}
    cheat_share: dict[str, float] = {}
    for cheat, make in casebook.CHEATS.items():
        caught, shares = 0, []
        for i in range(args.cheat_units):
            name, seed, slot, provider, verifier = next(source)
            spec = casebook.spec(name, seed=500 + i, dropout=args.dropout)
            shard = Shard.of(spec, slot, 0, spec.training.max_steps)
            start = _train(spec, None, shard, provider).checkpoint if i % 2 else None
            device = casebook.device_of(provider)
            committed = make(spec, start, shard, spec.checkpoint.every, _host(provider), device)
            verdict, _ = judged(spec, start, shard, committed, verifier, tolerance)
            caught += verdict.passed is False
            if verdict.decisive > 0:  # not refused on structure alone
                shares.append(verdict.decisive)
        detection[cheat] = caught / args.cheat_units
        print(f"{cheat}: {caught} of {args.cheat_units} caught", file=sys.stderr, flush=True)
        cheat_share[cheat] = min(shares) if shares else float("inf")

    exact_ratios, reproduced = [], 0
    for i in range(args.exact_units):
        spec = casebook.spec(
            list(casebook.SPECS)[i % len(casebook.SPECS)], seed=900 + i, dropout=args.dropout
        )
        shard = Shard.of(spec, 0, 0, spec.training.max_steps)
        clock = time.perf_counter if args.cuda else time.process_time  # the GPU's time is wall
        began = clock()
        a = _train(spec, None, shard, providers[0])
        trained = clock() - began
        b = _train(spec, None, shard, providers[0])
        exact_ratios.append((clock() - began - trained) / trained)
        reproduced += a.state_hash == b.state_hash

    largest_honest = max(honest_share, default=0.0)
    distance_cheats = [s for s in cheat_share.values() if s != float("inf")]
    figures = {
        "honest_units": args.units,
        "false_failures": false_failures,
        "false_failure_ratio": false_failures / args.units,
        "tolerant_cost_ratio": verify_s / train_s,
        "exact_cost_ratio": sorted(exact_ratios)[len(exact_ratios) // 2],
        "exact_reproduced_ratio": reproduced / args.exact_units,  # bit for bit, same class
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
    where = "GPU providers, CPU verifiers" if args.cuda else "CPU stand-ins"
    where += f", dropout {args.dropout}" if args.dropout else ""
    bench.report(f"Verification across execution classes ({where})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

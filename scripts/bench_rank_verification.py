"""Verification of ddp ranks across execution classes: false failures on honest units, detection
of each cheat, what a verifier spends against what the provider spent, and the separation
margin; beside the exact check (the baseline), which slashes an honest rank of another class.

For each compression of verifier.rank_casebook and each seed, a group of the tiny GPT trains
here. Every rank's every unit is then committed by an honest provider in another CPU class of
RANK_HOSTS (the group's others' payloads as recorded) and judged by a verifier in this machine's
rank class: within the shipped slack (verifier/rank_tolerance.json), and by hash. Each cheat of
rank_casebook.CHEATS is committed at one unit per group and judged within the slack. A unit's
share of the bound is the least slack its payloads need (rank_casebook.rerun_needs) over the
bound, or its residuals' gaps over theirs where it commits residuals inside it (units longer
than DDP_RESIDUAL_EVERY steps), whichever is larger.

    python scripts/bench_rank_verification.py              # a quick run (2 seeds)
    python scripts/bench_rank_verification.py --seeds 4    # the figure
    python scripts/bench_rank_verification.py --every 60   # units of three residual stretches
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

from benchkit import Bench

from marketplace.protocol.rank_bundle import load_rank_bundle
from marketplace.protocol.spec import JobSpec
from node.distributed.rank_unit import rank_class
from verifier import rank_casebook
from verifier.rank_recompute import RankJudgement, judge_rank, rank_tolerance

EVERY = 20  # steps per unit by default: node/specs/tiny-ddp-3.yaml's
UNITS = 2
TARGETS = {
    "false_failure_ratio": "<= 0",
    "tolerant_cost_ratio": "<= 2.0",
} | {f"{cheat}_detection_ratio": ">= 0.99" for cheat in rank_casebook.CHEATS}


def judged(
    spec: JobSpec, index: int, unit: tuple[str, bytes], previous: tuple[str, bytes], exact: bool
) -> RankJudgement:
    """A verifier in this machine's rank class judging `unit` (a commitment and bundle)."""
    own = rank_class(spec).class_id()
    committed, bundle = unit
    rank = load_rank_bundle(bundle).unit.rank
    return judge_rank(
        spec,
        rank,
        index,
        committed,
        bundle,
        None,
        previous if index else None,
        reproduces=(lambda _: True) if exact else (lambda class_id: class_id == own),
        signers=rank_casebook.local_signers(spec),
    )


def share_of_bound(spec: JobSpec, bundle: bytes) -> float:
    """The largest slack the unit's payloads need over its bound, or its committed residuals'
    largest gap over theirs, whichever is larger."""
    needed, gaps, _ = rank_casebook.rerun_needs(spec, bundle, "t1")
    tolerance = rank_tolerance()
    return max([max(needed) / tolerance.payload, *(g / tolerance.residual for g in gaps)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2, help="groups trained per compression")
    parser.add_argument("--every", type=int, default=EVERY, help="steps per ddp unit")
    args = parser.parse_args()
    bench = Bench("rank-verification", TARGETS)
    _, *hosts = rank_casebook.RANK_HOSTS  # the classes honest providers stand in with

    honest_units = false_failures = exact_false_failures = 0
    honest_shares: list[float] = []
    caught = dict.fromkeys(rank_casebook.CHEATS, 0)
    cheat_shares: dict[str, list[float]] = {cheat: [] for cheat in rank_casebook.CHEATS}
    provide_s = verify_s = 0.0
    groups = list(itertools.product(rank_casebook.COMPRESSIONS, range(args.seeds)))
    for number, (compression, seed) in enumerate(groups):
        spec = rank_casebook.group_spec(compression, seed=300 + seed, units=UNITS, every=args.every)
        with tempfile.TemporaryDirectory(prefix="zoo-bench-") as folder:
            rank_casebook.train_group(spec, Path(folder))
            bundles = {
                (rank, index): rank_casebook.committed_bundle(spec, Path(folder), rank, index)
                for rank, index in itertools.product(range(spec.distributed.nodes), range(UNITS))
            }
        for (rank, index), (_, bundle) in bundles.items():
            host = hosts[(rank + index + seed) % len(hosts)]
            previous = bundles[rank, index - 1] if index else bundles[rank, index]
            began = time.process_time()
            honest = rank_casebook.provide(spec, bundle, host)
            provide_s += time.process_time() - began
            began = time.process_time()
            verdict = judged(spec, index, honest, previous, exact=False)
            verify_s += time.process_time() - began
            honest_units += 1
            honest_shares.append(share_of_bound(spec, honest[1]))
            if not verdict.passed:
                false_failures += 1
                print(f"FALSE FAILURE {compression} seed {seed} rank {rank}: {verdict.reason}")
            exact = judged(spec, index, honest, previous, exact=True)
            exact_false_failures += exact.passed is False
        rank, index = number % spec.distributed.nodes, UNITS - 1
        bundle, other = bundles[rank, index][1], bundles[(rank + 1) % 3, index][1]
        for cheat, make in rank_casebook.CHEATS.items():
            committed = make(spec, bundle, other, hosts[number % len(hosts)])
            verdict = judged(spec, index, committed, bundles[rank, index - 1], exact=False)
            caught[cheat] += verdict.passed is False
            cheat_shares[cheat].append(share_of_bound(spec, committed[1]))
        print(f"{compression} seed {seed}: done", file=sys.stderr, flush=True)

    largest_honest = max(honest_shares)
    smallest_cheat = min(min(shares) for shares in cheat_shares.values())
    figures = {
        "honest_units": honest_units,
        "false_failures": false_failures,
        "false_failure_ratio": false_failures / honest_units,
        "exact_false_failure_ratio": exact_false_failures / honest_units,  # the baseline
        "tolerant_cost_ratio": verify_s / provide_s,
        "largest_honest_share_of_bound": largest_honest,
        "smallest_cheat_share_of_bound": smallest_cheat,
        "separation_margin_ratio": smallest_cheat / max(largest_honest, 1e-12),
        "cheat_units_each": len(groups),
    }
    for cheat in rank_casebook.CHEATS:
        figures[f"{cheat}_detection_ratio"] = caught[cheat] / len(groups)
        figures[f"{cheat}_share_of_bound"] = min(cheat_shares[cheat])
    bench.record(figures)
    bench.report("ddp ranks judged across execution classes (CPU stand-ins)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

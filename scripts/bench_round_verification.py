"""Verification of DiLoCo rounds across execution classes: false failures on honest rounds,
detection of each cheat, what a verifier spends against what the provider spent, and the
separation margin; beside the exact check (the baseline), which slashes an honest rank of
another class.

For each compression of verifier.rank_casebook and each seed, a DiLoCo group of the tiny GPT
trains here (node/specs/tiny-diloco-3.yaml's 3 rounds of 20 local steps). Every rank's every
round is then committed by an honest provider in another CPU class of RANK_HOSTS and judged by a
verifier in this machine's rank class: by its segments within the shipped bounds
(verifier/rank_tolerance.json), and by hash; a later round also by where the slot's previous
round leaves it. Each cheat of rank_casebook.ROUND_CHEATS, and each start of
rank_casebook.START_CHEATS (a round trained honestly from elsewhere), is committed at one round
per group and judged the same way. A round's share of the bound is the larger of its local
steps' (the distances that decided the verdict) and its payload's (the least slack that
explains it, over the bound); a cheat failed by an exact check has none, and neither has a
start cheat, whose round is honest from where it starts: only its detection counts.

    python scripts/bench_round_verification.py              # a quick run (1 seed)
    python scripts/bench_round_verification.py --seeds 2    # the figure
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import tempfile
import time
from pathlib import Path

from benchkit import Bench

from marketplace.protocol.rank_bundle import load_rank_bundle
from marketplace.protocol.spec import JobSpec
from node.distributed.diloco import DilocoConfig, round_vector
from node.distributed.job import group_config
from node.distributed.rank_unit import rank_class
from verifier import rank_casebook
from verifier.rank_recompute import RankJudgement, judge_rank, rank_tolerance

EVERY = 20  # local steps per round: node/specs/tiny-diloco-3.yaml's
ROUNDS = 3
CHEATS = [*rank_casebook.ROUND_CHEATS, *rank_casebook.START_CHEATS]
TARGETS = {
    "false_failure_ratio": "<= 0",
    "tolerant_cost_ratio": "<= 2.0",
} | {f"{cheat}_detection_ratio": ">= 0.99" for cheat in CHEATS}


def judged(
    spec: JobSpec,
    store: rank_casebook.Store,
    unit: tuple[str, bytes],
    previous: tuple[str, bytes] | None,
    exact: bool,
) -> RankJudgement:
    """A verifier in this machine's rank class judging `unit` (a commitment and bundle) after
    the slot's `previous` round."""
    own = rank_class(spec).class_id()
    committed, bundle = unit
    loaded = load_rank_bundle(bundle).unit
    return judge_rank(
        spec,
        loaded.rank,
        loaded.round_,
        committed,
        bundle,
        previous=previous,
        reproduces=(lambda _: True) if exact else (lambda class_id: class_id == own),
        states=rank_casebook.stored(store),
        signers=rank_casebook.local_signers(spec),
    )


def committed_cheats(
    spec: JobSpec,
    store: rank_casebook.Store,
    bundles: dict[tuple[int, int], tuple[str, bytes]],
    rank: int,
    host: str,
) -> dict[str, tuple[str, bytes]]:
    """Every cheat, committed by `rank` in class `host` at the group's last round (a start cheat
    only where it moves the rank's inputs)."""
    index = ROUNDS - 1
    bundle, other = bundles[rank, index][1], bundles[(rank + 1) % 3, index][1]
    previous = bundles[rank, index - 1][1]
    made = {
        name: make(spec, bundle, other, host, store)
        for name, make in rank_casebook.ROUND_CHEATS.items()
    }
    for name, move in rank_casebook.START_CHEATS.items():
        cheat = rank_casebook.started_elsewhere(spec, bundle, previous, host, store, move)
        if cheat is not None:
            made[name] = cheat
    return made


def share_of_bound(
    spec: JobSpec, store: rank_casebook.Store, bundle: bytes, verdict: RankJudgement
) -> float:
    """The round's share of the bound: its local steps' and its payload's, the larger; NaN
    when an exact check failed it before any distance was taken."""
    if verdict.judgement is None or (not verdict.passed and not verdict.judgement["steps_run"]):
        return math.nan
    config = group_config(spec)
    assert isinstance(config, DilocoConfig)
    loaded = load_rank_bundle(bundle)
    assert loaded.segments is not None
    end = rank_casebook.stored(store)(loaded.segments[-1])
    assert end is not None
    _, vector = round_vector(spec, config, loaded.unit, end.state["model"])
    payload = config.compressor.parse(loaded.payload, vector.numel())
    needed = rank_casebook.needed_slack(config.compressor, payload, vector, loaded.unit.round_)
    steps = verdict.judgement["decisive_share_of_bound"]
    return max(steps, needed / rank_tolerance().payload)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help="groups trained per compression")
    args = parser.parse_args()
    bench = Bench("round-verification", TARGETS)
    _, *hosts = rank_casebook.RANK_HOSTS  # the classes honest providers stand in with

    honest_rounds = false_failures = exact_false_failures = 0
    honest_shares: list[float] = []
    caught, tried = dict.fromkeys(CHEATS, 0), dict.fromkeys(CHEATS, 0)
    cheat_shares: dict[str, list[float]] = {cheat: [] for cheat in CHEATS}
    provide_s = verify_s = 0.0
    groups = list(itertools.product(rank_casebook.COMPRESSIONS, range(args.seeds)))
    for number, (compression, seed) in enumerate(groups):
        spec = rank_casebook.group_spec(
            compression, seed=300 + seed, units=ROUNDS, every=EVERY, strategy="diloco"
        )
        store: rank_casebook.Store = {}
        with tempfile.TemporaryDirectory(prefix="zoo-bench-") as folder:
            rank_casebook.train_group(spec, Path(folder))
            bundles = {
                (rank, index): rank_casebook.committed_bundle(
                    spec, Path(folder), rank, index, store
                )
                for rank, index in itertools.product(range(spec.distributed.nodes), range(ROUNDS))
            }
        for (rank, index), (_, bundle) in bundles.items():
            host = hosts[(rank + index + seed) % len(hosts)]
            previous = bundles.get((rank, index - 1))
            began = time.process_time()
            honest = rank_casebook.provide_round(spec, bundle, host, store)
            provide_s += time.process_time() - began
            began = time.process_time()
            verdict = judged(spec, store, honest, previous, exact=False)
            verify_s += time.process_time() - began
            honest_rounds += 1
            honest_shares.append(share_of_bound(spec, store, honest[1], verdict))
            if not verdict.passed:
                false_failures += 1
                print(f"FALSE FAILURE {compression} seed {seed} rank {rank}: {verdict.reason}")
            exact = judged(spec, store, honest, previous, exact=True)
            exact_false_failures += exact.passed is False
        rank = number % spec.distributed.nodes
        previous = bundles[rank, ROUNDS - 2]
        made = committed_cheats(spec, store, bundles, rank, hosts[number % len(hosts)])
        for cheat, committed in made.items():
            verdict = judged(spec, store, committed, previous, exact=False)
            caught[cheat] += verdict.passed is False
            tried[cheat] += 1
            if cheat in rank_casebook.ROUND_CHEATS:  # a start is not judged by a distance
                cheat_shares[cheat].append(share_of_bound(spec, store, committed[1], verdict))
            if verdict.passed:
                print(f"MISSED {cheat} {compression} seed {seed}", file=sys.stderr)
        print(f"{compression} seed {seed}: done", file=sys.stderr, flush=True)

    largest_honest = max(honest_shares)
    measured = [s for shares in cheat_shares.values() for s in shares if not math.isnan(s)]
    smallest_cheat = min(measured)
    figures = {
        "honest_rounds": honest_rounds,
        "false_failures": false_failures,
        "false_failure_ratio": false_failures / honest_rounds,
        "exact_false_failure_ratio": exact_false_failures / honest_rounds,  # the baseline
        "tolerant_cost_ratio": verify_s / provide_s,
        "largest_honest_share_of_bound": largest_honest,
        "smallest_cheat_share_of_bound": smallest_cheat,
        "separation_margin_ratio": smallest_cheat / max(largest_honest, 1e-12),
    }
    for cheat, shares in cheat_shares.items():
        figures[f"{cheat}_rounds"] = tried[cheat]
        figures[f"{cheat}_detection_ratio"] = caught[cheat] / tried[cheat]
        distances = [s for s in shares if not math.isnan(s)]
        if distances:  # none when every one failed an exact check before any distance
            figures[f"{cheat}_share_of_bound"] = min(distances)
    bench.record(figures)
    bench.report("DiLoCo rounds judged across execution classes (CPU stand-ins)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

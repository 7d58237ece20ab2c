"""Measure how far honest ranks are from a verifier of another execution class that re-runs
their units, and write the table it judges with (verifier/rank_tolerance.json).

For each compression of verifier.rank_casebook and each seed, a ddp group and a DiLoCo group of
the tiny GPT train in this machine's rank class (one thread, oneDNN on). Every rank's every unit
is then re-run in the other CPU classes of RANK_HOSTS as a verifier re-runs it.

- ddp: the re-run follows the group's recorded aggregates, and each step's committed payload is
  measured by the least slack (a share of the re-run vector's RMS) within which the re-run
  explains it, per step since the re-run last took up a residual the rank committed; each
  residual the rank commits inside its unit (every DDP_RESIDUAL_EVERY steps), and where the
  re-run leaves the rank against where the rank went on from (its trainer's state and its
  residual), by the largest difference of a tensor's entries over that tensor's RMS.
- DiLoCo: each round is re-run from its start and from each of the rank's segment states, and
  every segment end compared by the distances a single node's unit is judged by (weights,
  sketch, loss: verifier/trajectory.py), per steps since the common start; and the next round's
  start, rebuilt from the round's committed bytes as a verifier rebuilds it, against where the
  rank went on from, by the gaps a ddp start is measured by.

The file keeps the largest of each; the verifier's bounds follow by the policy in
verifier/trajectory.py (MARGIN, FLOOR).

    python scripts/calibrate_rank_verification.py            # writes verifier/rank_tolerance.json
    python scripts/calibrate_rank_verification.py --check    # prints, writes nothing
    python scripts/calibrate_rank_verification.py --check --ddp-every 60   # longer ddp units
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

import torch

from marketplace.protocol.rank_bundle import DDP_RESIDUAL_EVERY, RankUnit, load_rank_bundle
from marketplace.protocol.spec import JobSpec
from node.distributed.diloco import DilocoConfig
from node.distributed.job import group_config
from node.distributed.rank_unit import unit_path
from verifier import rank_casebook
from verifier.rank_recompute import (
    RANK_TOLERANCE_FILE,
    ROUND_MEASURES,
    start_gaps,
    where_round_leaves,
)
from verifier.trajectory import MEASURES, TOLERANCE_FORMAT

UNITS = 2
EVERY = 20  # local steps per DiLoCo round: node/specs/tiny-diloco-3.yaml's
ROUNDS = 3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2, help="groups trained per compression")
    parser.add_argument("--check", action="store_true", help="print only; write nothing")
    parser.add_argument(
        "--ddp-every", type=int, default=DDP_RESIDUAL_EVERY, help="steps per ddp unit"
    )
    parser.add_argument("--out", type=Path, default=RANK_TOLERANCE_FILE, help="where to write")
    args = parser.parse_args()
    if args.ddp_every < DDP_RESIDUAL_EVERY:
        parser.error(f"--ddp-every must be at least {DDP_RESIDUAL_EVERY}: the table's length")

    trained, *others = rank_casebook.RANK_HOSTS
    groups = list(itertools.product(rank_casebook.COMPRESSIONS, range(args.seeds)))
    (payload, trainer, residual), pairs = measure_ddp(groups, others, args.ddp_every)
    rounds, round_start, round_pairs = measure_rounds(groups, others)
    document = {
        "format": TOLERANCE_FORMAT,
        "classes": [trained, *others],
        "compressions": list(rank_casebook.COMPRESSIONS),
        "seeds": args.seeds,
        "pairs": pairs,
        "round_pairs": round_pairs,
        "torch": str(torch.__version__),
        "measured": {
            "payload": payload,
            "trainer": [trainer],
            "residual": [residual],
            **{key: rounds[m] for key, m in ROUND_MEASURES.items()},
            "round_start": [round_start],
        },
    }
    text = json.dumps(document, indent=1) + "\n"
    print(text)
    if not args.check:
        args.out.write_text(text)
    return 0


def measure_ddp(
    groups: list[tuple[str, int]], others: list[str], every: int
) -> tuple[tuple[list[float], float, float], int]:
    """The largest payload slack per step since a re-run's start or its last committed
    residual, trainer gap and residual gap, over ddp units of `every` steps; the class pairs
    measured."""
    payload, trainer, residual = [0.0] * DDP_RESIDUAL_EVERY, 0.0, 0.0
    pairs = 0
    for compression, seed in groups:
        spec = rank_casebook.group_spec(compression, seed=100 + seed, units=UNITS, every=every)
        with tempfile.TemporaryDirectory(prefix="zoo-calibrate-") as folder:
            rank_casebook.train_group(spec, Path(folder))
            for rank, index in itertools.product(range(spec.distributed.nodes), range(UNITS)):
                _, bundle = rank_casebook.committed_bundle(spec, Path(folder), rank, index)
                # where the rank really went on from: the next unit's inputs
                following = RankUnit.load(unit_path(folder, index + 1, rank))
                for host in others:
                    pairs += 1
                    needed, inside, rerun = rank_casebook.rerun_needs(spec, bundle, host)
                    for step, need in enumerate(needed):
                        at = step % DDP_RESIDUAL_EVERY  # residuals are taken up at multiples
                        payload[at] = max(payload[at], need)
                    gaps = start_gaps(rerun, following)
                    trainer = max(trainer, gaps[0])
                    residual = max(residual, gaps[1], *inside)
        print(
            f"ddp {compression} seed {seed}: payload {max(payload):.3g}, "
            f"trainer {trainer:.3g}, residual {residual:.3g}",
            file=sys.stderr,
            flush=True,
        )
    return (payload, trainer, residual), pairs


def measure_rounds(
    groups: list[tuple[str, int]], others: list[str]
) -> tuple[dict[str, list[float]], float, int]:
    """Per distance, the largest honest one n steps after a common start of a DiLoCo round's
    re-run (index n - 1), over every rank's every round re-run in the other classes from the
    round's start and from each of its segment states; the largest gap of a next round's start
    rebuilt in those classes; the class pairs measured."""
    measured = {m: [0.0] * EVERY for m in MEASURES}
    start = 0.0
    pairs = 0
    for compression, seed in groups:
        spec = rank_casebook.group_spec(
            compression, seed=100 + seed, units=ROUNDS, every=EVERY, strategy="diloco"
        )
        with tempfile.TemporaryDirectory(prefix="zoo-calibrate-") as folder:
            rank_casebook.train_group(spec, Path(folder))
            store: rank_casebook.Store = {}
            for rank, index in itertools.product(range(spec.distributed.nodes), range(ROUNDS)):
                _, bundle = rank_casebook.committed_bundle(spec, Path(folder), rank, index, store)
                following = RankUnit.load(unit_path(folder, index + 1, rank))
                for host in others:
                    pairs += 1
                    for n, found in rank_casebook.round_drift(spec, bundle, store, host):
                        for m, d in found.items():
                            measured[m][n - 1] = max(measured[m][n - 1], d)
                    start = max(start, rebuilt_gap(spec, bundle, store, host, following))
        print(
            f"diloco {compression} seed {seed}: "
            + ", ".join(f"{m} {max(v):.3g}" for m, v in measured.items())
            + f", start {start:.3g}",
            file=sys.stderr,
            flush=True,
        )
    for m in MEASURES:  # a step count no boundary fell on takes the envelope before it
        for n in range(1, EVERY):
            measured[m][n] = max(measured[m][n], measured[m][n - 1])
    return measured, start, pairs


def rebuilt_gap(
    spec: JobSpec, bundle: bytes, store: rank_casebook.Store, host: str, following: RankUnit
) -> float:
    """How far the next round's start, rebuilt from `bundle`'s round in class `host`, is from
    `following`, where the rank went on from."""
    config = group_config(spec)
    assert isinstance(config, DilocoConfig)
    with rank_casebook.rank_host(host):
        rebuilt = where_round_leaves(
            spec, config, load_rank_bundle(bundle), rank_casebook.stored(store)
        )
    assert rebuilt is not None, "an honest round's end and exchange"
    return max(start_gaps(rebuilt, following))


if __name__ == "__main__":
    raise SystemExit(main())

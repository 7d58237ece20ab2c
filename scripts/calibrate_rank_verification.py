"""Measure the slack honest ddp ranks need when a verifier of another execution class re-runs
their units, and write the table it judges with (verifier/rank_tolerance.json).

For each compression of verifier.rank_casebook and each seed, a group of the tiny GPT trains in
this machine's rank class (one thread, oneDNN on). Every rank's every unit is then re-run in the
other CPU classes of RANK_HOSTS as a verifier re-runs it, following the group's recorded
aggregates, and each step's committed payload is measured by the least slack (a share of the
re-run vector's RMS) within which the re-run explains it, and where the re-run leaves the rank
against where the rank went on from: its trainer's state and its residual, each by the largest
difference of a tensor's entries over that tensor's RMS. The file keeps the largest payload
slack per step of the unit and the largest gaps; the verifier's bounds follow by the policy in
verifier/trajectory.py (MARGIN, FLOOR).

    python scripts/calibrate_rank_verification.py            # writes verifier/rank_tolerance.json
    python scripts/calibrate_rank_verification.py --check    # prints, writes nothing
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

import torch

from marketplace.protocol.rank_bundle import RankUnit
from node.distributed.rank_unit import unit_path
from verifier import rank_casebook
from verifier.rank_recompute import RANK_MEASURES, RANK_TOLERANCE_FILE, start_gaps
from verifier.trajectory import TOLERANCE_FORMAT

EVERY = 20  # steps per unit: node/specs/tiny-ddp-3.yaml's
UNITS = 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2, help="groups trained per compression")
    parser.add_argument("--check", action="store_true", help="print only; write nothing")
    parser.add_argument("--out", type=Path, default=RANK_TOLERANCE_FILE, help="where to write")
    args = parser.parse_args()

    trained, *others = rank_casebook.RANK_HOSTS
    payload, trainer, residual = [0.0] * EVERY, 0.0, 0.0
    pairs = 0
    for compression, seed in itertools.product(rank_casebook.COMPRESSIONS, range(args.seeds)):
        spec = rank_casebook.group_spec(compression, seed=100 + seed, units=UNITS, every=EVERY)
        with tempfile.TemporaryDirectory(prefix="zoo-calibrate-") as folder:
            rank_casebook.train_group(spec, Path(folder))
            for rank, index in itertools.product(range(spec.distributed.nodes), range(UNITS)):
                _, bundle = rank_casebook.committed_bundle(spec, Path(folder), rank, index)
                # where the rank really went on from: the next unit's inputs
                following = RankUnit.load(unit_path(folder, index + 1, rank))
                for host in others:
                    pairs += 1
                    needed, rerun = rank_casebook.rerun_needs(spec, bundle, host)
                    payload = [max(a, b) for a, b in zip(payload, needed, strict=True)]
                    gaps = start_gaps(rerun, following)
                    trainer, residual = max(trainer, gaps[0]), max(residual, gaps[1])
        print(
            f"{compression} seed {seed}: payload {max(payload):.3g}, "
            f"trainer {trainer:.3g}, residual {residual:.3g}",
            file=sys.stderr,
        )
    document = {
        "format": TOLERANCE_FORMAT,
        "classes": [trained, *others],
        "compressions": list(rank_casebook.COMPRESSIONS),
        "seeds": args.seeds,
        "pairs": pairs,
        "torch": str(torch.__version__),
        "measured": dict(zip(RANK_MEASURES, (payload, [trainer], [residual]), strict=True)),
    }
    text = json.dumps(document, indent=1) + "\n"
    print(text)
    if not args.check:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

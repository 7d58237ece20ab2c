"""Measure how far honest runs of one unit drift apart across execution classes, and write the
tolerance a verifier of another class judges with (verifier/tolerance.json).

Each case trains a unit of a small spec (from the spec's seed, or from a checkpoint a unit in)
as a provider in one class of verifier.casebook.HOSTS (and CUDA_HOSTS with --cuda), keeping every
segment's state, and re-runs it in every other class from the unit's start and from each of the
provider's segment states, as a verifier does; it records the three distances of
verifier.trajectory at every segment end by the steps run since the common start. The file
keeps, per distance and step count, the largest seen; the verifier's bound follows from it by
the policy in verifier/trajectory.py (MARGIN, FLOOR).

    python scripts/calibrate_verification.py            # writes verifier/tolerance.json
    python scripts/calibrate_verification.py --check    # prints, writes nothing
    python scripts/calibrate_verification.py --cuda --merge    # folds a GPU's classes in

The shipped table is a CPU run (--seeds 2) merged with a --cuda --seeds 2 run on an H200: a
merge keeps, per distance and step count, the larger of the file's and the run's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import torch

from marketplace.protocol import trace
from marketplace.protocol.checkpoint import Checkpoint
from node.engine import Shard, run_unit
from node.engine.environment import Host
from verifier import casebook
from verifier.trajectory import MEASURES, TOLERANCE_FILE, TOLERANCE_FORMAT, segment_drift

# the table's length: the longest segment, which a dispute re-runs alone and judges by the table
MAX_STEPS = trace.MAX_SEGMENT_STEPS


def trajectory(
    spec: Any, start: Checkpoint | None, shard: Shard, steps: int, host: Host, device: str
) -> list[tuple[dict[str, Any], Checkpoint]]:
    """The segments of `steps` steps from `start` in one class, each with its state."""
    kept: list[tuple[dict[str, Any], Checkpoint]] = []
    run_unit(
        spec,
        start,
        shard,
        steps,
        device=device,
        host=host,
        on_segment=lambda segment, state: kept.append((segment, state)),
    )
    return kept


def drift(
    spec: Any,
    start: Checkpoint | None,
    shard: Shard,
    steps: int,
    provider: tuple[Host, str],
    verifier: tuple[Host, str],
) -> list[tuple[int, dict[str, float]]]:
    """(steps since a common start, distances) for every pair of segment ends a verifier in
    `verifier`'s class compares with a provider in `provider`'s: re-running from the unit's
    start and from each of the provider's segment states, as trajectory.judge does."""
    theirs = trajectory(spec, start, shard, steps, *provider)
    begin = start.step if start else 0
    origins: list[Checkpoint | None] = [start] + [state for _, state in theirs[:-1]]
    out = []
    for i, origin in enumerate(origins):
        at = origin.step if origin else begin
        ours = trajectory(spec, origin, shard, begin + steps - at, *verifier)
        out += segment_drift(theirs[i:], ours, (origin or _init(spec)).state["model"], at)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="training seeds per spec")
    parser.add_argument("--cuda", action="store_true", help="add the GPU's classes")
    parser.add_argument("--check", action="store_true", help="print only; write nothing")
    parser.add_argument("--out", type=Path, default=TOLERANCE_FILE, help="where to write")
    parser.add_argument("--merge", action="store_true", help="fold the run into --out's table")
    args = parser.parse_args()

    classes: list[tuple[str, Host, str]] = [(n, h, "cpu") for n, h in casebook.HOSTS.items()]
    if args.cuda:
        classes += [(n, h, "cuda") for n, h in casebook.CUDA_HOSTS.items()]
    measured = {m: [0.0] * MAX_STEPS for m in MEASURES}
    pairs = 0
    for name, seed in itertools.product(casebook.SPECS, range(args.seeds)):
        spec = casebook.spec(name, seed=100 + seed)
        shard = Shard.of(spec, seed % 3, 0, spec.training.max_steps)
        every = spec.checkpoint.every
        steps = min(every, MAX_STEPS)
        # a unit from the seed, and one a unit in (trained in the first class)
        start = run_unit(spec, None, shard, every, device="cpu", host=classes[0][1]).checkpoint
        for origin in (None, start):
            # each class as the provider once, judged by the next (the last by the first)
            for (_, host_a, device_a), (_, host_b, device_b) in zip(
                classes, classes[1:] + classes[:1], strict=True
            ):
                pairs += 1
                provider, verifier = (host_a, device_a), (host_b, device_b)
                for n, found in drift(spec, origin, shard, steps, provider, verifier):
                    for m, d in found.items():
                        measured[m][n - 1] = max(measured[m][n - 1], d)
        print(f"{name} seed {seed}: {pairs} class pairs so far", file=sys.stderr, flush=True)
    for m in MEASURES:  # a step count no boundary fell on takes the envelope before it
        for n in range(1, MAX_STEPS):
            measured[m][n] = max(measured[m][n], measured[m][n - 1])
    document = {
        "format": TOLERANCE_FORMAT,
        "classes": [n for n, _, _ in classes],
        "specs": list(casebook.SPECS),
        "seeds": args.seeds,
        "pairs": pairs,
        "torch": str(torch.__version__),
        "measured": measured,
    }
    if args.merge:
        document = merge(json.loads(args.out.read_text()), document)
    text = json.dumps(document, indent=1) + "\n"
    print(text)
    if not args.check:
        args.out.write_text(text)
    return 0


def merge(into: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The table of two calibrations: each distance's larger entry, and both runs' classes,
    class pairs and torch builds."""
    if into.get("format") != TOLERANCE_FORMAT or into.get("specs") != run["specs"]:
        raise SystemExit(
            "the tables measure different things: merge only the same format and specs"
        )
    torches = into["torch"] if isinstance(into["torch"], list) else [into["torch"]]
    return run | {
        "classes": list(dict.fromkeys(into["classes"] + run["classes"])),
        "pairs": into["pairs"] + run["pairs"],
        "torch": list(dict.fromkeys([*torches, run["torch"]])),
        "measured": {
            m: [max(a, b) for a, b in zip(into["measured"][m], run["measured"][m], strict=True)]
            for m in MEASURES
        },
    }


def _init(spec: Any) -> Checkpoint:
    torch.manual_seed(spec.reproducibility.seed)
    return Checkpoint({"model": spec.build_model().state_dict()})


if __name__ == "__main__":
    raise SystemExit(main())

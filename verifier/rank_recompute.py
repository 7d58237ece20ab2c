"""Judge one rank's round of a group job: re-run it from its pinned inputs, compare payload hashes.

A group job's unit is a rank's DiLoCo round (see node/work.py): its CID names a rank bundle,
its state hash is the sha256 of the payload the rank sent. Re-running the round from the
bundle's inputs on the CPU gives the payload an honest rank sent, bit for bit, so a rank
that sent anything else is named by its own commitment.

What this does not check is that the inputs themselves follow from the previous round's
aggregate: a rank that commits a consistent round from made-up inputs passes here.
"""

from __future__ import annotations

from typing import NamedTuple

from node.distributed.group import DistributedConfigError
from node.distributed.rank_unit import run_rank_unit, update_sha256
from node.engine import JobSpec
from node.work import diloco_config, load_rank_bundle


class RankJudgement(NamedTuple):
    passed: bool | None  # None: the unit cannot be judged, nothing is posted
    reason: str
    recomputed_state_hash: str | None = None


def judge_rank(
    spec: JobSpec, slot: int, index: int, committed: str, bundle: bytes
) -> RankJudgement:
    """Whether the bundle committed as unit `index` of `slot` reproduces the hash `committed`."""
    try:
        config = diloco_config(spec)
    except DistributedConfigError as exc:
        return RankJudgement(None, f"the job spec cannot be run: {exc}")
    try:
        unit, payload, _ = load_rank_bundle(bundle)
    except ValueError as exc:
        return RankJudgement(False, f"committed rank bundle unreadable: {exc}")
    if (unit.rank, unit.round_) != (slot, index):
        return RankJudgement(
            False,
            f"the bundle holds rank {unit.rank} round {unit.round_}, not {slot} round {index}",
        )
    if update_sha256(payload) != committed:
        return RankJudgement(False, "the pinned payload is not the committed one")
    recomputed = run_rank_unit(spec, config, unit).sha256
    if recomputed != committed:
        return RankJudgement(False, "the re-run round sends a different payload", recomputed)
    return RankJudgement(True, "the re-run round sends the committed payload", recomputed)

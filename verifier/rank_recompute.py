"""Judge one rank's unit of a group job: re-run it from its pinned bundle, compare hashes.

A group job's unit is a rank's DiLoCo round or ddp unit: its CID names a rank bundle
(marketplace/protocol/rank_bundle.py), its state hash is the sha256 of the payloads the rank
sent. Re-running the unit from the bundle on the CPU gives the payloads an honest rank sent,
bit for bit, so a rank that sent anything else is named by its own commitment. In ddp the
bundle also records each step's members and their payloads, which the re-run aggregates as the
rank did; a record of the rank's own payload that is not what its re-run sends fails the unit,
and so does a record the other members' bundles and commitments outvote (`group_records`):
made-up payloads of other members, or a payload the rank sent the group but did not commit.

A unit must also start where the rank was left: unit 0 from the job's seed, and a ddp unit
where the re-run of the slot's previous unit ends. A DiLoCo round starts from weights the
other ranks' payloads of the round before make, so past round 0 its inputs are not checked:
a rank that commits a consistent round from made-up global weights passes here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from marketplace.protocol.rank_bundle import RankBundle, RankUnit, load_rank_bundle, update_sha256
from node.distributed.group import DistributedConfigError, GroupConfig
from node.distributed.job import first_unit, group_config, run_rank_unit
from node.engine import JobSpec
from verifier.group_records import MemberView, contradiction, member_view


class RankJudgement(NamedTuple):
    passed: bool | None  # None: the unit cannot be judged, nothing is posted
    reason: str
    recomputed_state_hash: str | None = None


def judge_rank(
    spec: JobSpec,
    slot: int,
    index: int,
    committed: str,
    bundle: bytes,
    peers: Mapping[int, tuple[str, bytes]] | None = None,
    previous: tuple[str, bytes] | None = None,
) -> RankJudgement:
    """Whether the bundle committed as unit `index` of `slot` reproduces the hash `committed`
    from where the rank was left, and in ddp whether its records agree with the group's.

    `peers` maps the other slots that committed the same unit to their commitment and bundle;
    `previous` is the slot's commitment and bundle of unit `index - 1` (ddp).
    """
    try:
        config = group_config(spec)
    except DistributedConfigError as exc:
        return RankJudgement(None, f"the job spec cannot be run: {exc}")
    try:
        unit, payload, _, rounds = load_rank_bundle(bundle)
    except ValueError as exc:
        return RankJudgement(False, f"committed rank bundle unreadable: {exc}")
    if (unit.rank, unit.round_) != (slot, index):
        return RankJudgement(
            False,
            f"the bundle holds rank {unit.rank} unit {unit.round_}, not {slot} unit {index}",
        )
    if update_sha256(payload) != committed:
        return RankJudgement(False, "the pinned payload is not the committed one")
    expected = len(config.unit_rounds(spec, index))
    if rounds is not None and len(rounds) != expected:
        return RankJudgement(False, f"the bundle records {len(rounds)} rounds, not {expected}")
    own = None if rounds is None else member_view(payload, rounds)
    if own is not None:  # ddp (a payload that does not split fails its re-run below)
        views = _peer_views(index, own, peers or {}) | {slot: own}
        reason = contradiction(slot, config.unit_rounds(spec, index), views)
        if reason is not None:
            return RankJudgement(False, reason)
    try:
        recomputed = run_rank_unit(spec, config, unit, rounds).sha256
    except ValueError as exc:  # rounds missing, or contradicting the re-run (ReplayMismatch)
        return RankJudgement(False, f"the bundle cannot be re-run: {exc}")
    if recomputed != committed:
        return RankJudgement(False, "the re-run unit sends a different payload", recomputed)
    misplaced = _misplaced_start(spec, config, unit, previous)
    if misplaced is not None:
        return RankJudgement(False, misplaced, recomputed)
    return RankJudgement(True, "the re-run unit sends the committed payload", recomputed)


def _misplaced_start(
    spec: JobSpec, config: GroupConfig, unit: RankUnit, previous: tuple[str, bytes] | None
) -> str | None:
    """Why the unit does not start where the rank was left; None when it does, or when that
    cannot be told (no previous ddp bundle, or one that fails its own verification)."""
    if unit.round_ == 0:
        if unit.state_hash() != first_unit(spec, unit.rank).state_hash():
            return "the unit does not start from the job's seed"
        return None
    if previous is None:
        return None
    commitment, data = previous
    before = _committed_bundle(data, unit.rank, unit.round_ - 1, commitment)
    if before is None or before.rounds is None:
        return None
    try:
        rerun = run_rank_unit(spec, config, before.unit, before.rounds)
    except ValueError:
        return None
    if rerun.following is None or rerun.sha256 != commitment:
        return None
    if rerun.following.state_hash() != unit.state_hash():
        return "the unit does not start where the slot's previous unit ends"
    return None


def _peer_views(
    index: int, own: MemberView, peers: Mapping[int, tuple[str, bytes]]
) -> dict[int, MemberView]:
    """The views of the peers whose bundles hold their committed unit `index`, with as many
    steps and bytes as this rank's; any other peer fails its own verification, not this one."""
    views = {}
    for peer, (commitment, data) in peers.items():
        bundle = _committed_bundle(data, peer, index, commitment)
        if bundle is None or bundle.rounds is None:
            continue
        view = member_view(bundle.payload, bundle.rounds)
        if view is not None and [len(p) for p in view.sent] == [len(p) for p in own.sent]:
            views[peer] = view
    return views


def _committed_bundle(data: bytes, rank: int, index: int, commitment: str) -> RankBundle | None:
    """The bundle in `data` if it is `rank`'s unit `index` holding the payload `commitment`
    names; None when it is anything else."""
    try:
        bundle = load_rank_bundle(data)
    except ValueError:
        return None
    if (bundle.unit.rank, bundle.unit.round_) != (rank, index):
        return None
    return bundle if update_sha256(bundle.payload) == commitment else None

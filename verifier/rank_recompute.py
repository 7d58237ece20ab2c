"""Judge one rank's unit of a group job: re-run it from its pinned bundle, compare hashes.

A group job's unit is a rank's DiLoCo round or ddp unit: its CID names a rank bundle
(marketplace/protocol/rank_bundle.py), its state hash is the sha256 of the payloads the rank
sent. Re-running the unit from the bundle on the CPU gives the payloads an honest rank sent,
bit for bit, so a rank that sent anything else is named by its own commitment. In ddp the
bundle also records each step's members and their payloads, which the re-run aggregates as the
rank did; a record of the rank's own payload that is not what its re-run sends fails the unit,
and so does a record the other members' bundles and commitments outvote (`group_records`):
made-up payloads of other members, or a payload the rank sent the group but did not commit.

A unit must also start where the rank was left: unit 0 from the job's seed, a ddp unit where
the re-run of the slot's previous unit ends, and a later DiLoCo round where the slot's previous
round leaves it: its committed end state, the residual its payload leaves, and the outer step
on the aggregate of what that round's members sent, as its bundle records them.

A verifier that does not reproduce the rank's recorded execution class judges the unit within
calibrated bounds instead. A ddp unit step by step (`TolerantReplay`): the committed payload
must be a compression of a vector within the slack of the verifier's own in every entry. A
DiLoCo round by the segments its local steps committed to, as a single node's unit is judged
(verifier.trajectory), and its payload against what the round's committed end makes (see
docs/verification.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch

from marketplace.protocol import trace
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.execution import ExecutionClass, ExecutionClassError
from marketplace.protocol.rank_bundle import (
    RankBundle,
    RankUnit,
    RecordedRound,
    load_rank_bundle,
    update_sha256,
)
from node.distributed.ddp import replay_ddp_unit
from node.distributed.diloco import DilocoConfig, following_round, local_steps, round_vector
from node.distributed.exchange import RankCheat, Slack, TolerantReplay, rms
from node.distributed.group import DistributedConfigError, GroupConfig, rank_trainer
from node.distributed.job import first_unit, group_config, run_rank_unit
from node.distributed.rank_unit import rank_threads
from node.engine import JobSpec
from node.engine.unit import SegmentSink
from verifier.group_records import MemberView, contradiction, member_view
from verifier.trajectory import (
    MEASURES,
    Ran,
    Rerun,
    StateSource,
    Tolerance,
    judge_trajectory,
    records_problem,
)

Reproduces = Callable[[str | None], bool]  # whether a verifier re-runs a class id bit for bit
RANK_TOLERANCE_FILE = Path(__file__).with_name("rank_tolerance.json")
# what a rank of another class may need: each step's payload, a share of the step's vector's
# RMS; a unit's start against the re-run of the one before: its trainer's state and its residual,
# each a share of every tensor's RMS; a DiLoCo round's segment ends, by the distances a single
# node's unit is judged by (verifier.trajectory.MEASURES); a later round's start against its
# rebuild from the round before, as the trainer's and residual's gaps are measured
ROUND_MEASURES = {f"round_{m}": m for m in MEASURES}
RANK_MEASURES = ("payload", "trainer", "residual", *ROUND_MEASURES, "round_start")
# what re-running from a bundle's inputs raises when they are not what a rank saves: the
# bundle is its provider's own commitment, so its unit fails (or, for a previous unit, is
# left to its own verification)
BAD_INPUTS = (ValueError, KeyError, TypeError, RuntimeError)


class RankTolerance(NamedTuple):
    payload: Slack
    trainer: float
    residual: float
    rounds: Tolerance  # a DiLoCo round's segment ends, measured as a single node's unit's are
    round_start: float  # a later DiLoCo round's start: its trainer's gap and its residual's


def rank_tolerance(tolerance: Tolerance | None = None) -> RankTolerance:
    """How far a rank of another class may be from a verifier's re-run: the bounds of the
    calibrated table (scripts/calibrate_rank_verification.py), the payload's for as many steps
    as it measured."""
    tolerance = tolerance or Tolerance.load(RANK_TOLERANCE_FILE, RANK_MEASURES)
    steps = len(tolerance.measured["payload"])
    payload = Slack(tolerance.bound("payload"), steps)
    rounds = Tolerance(
        {m: tolerance.measured[key] for key, m in ROUND_MEASURES.items()},
        tolerance.margin,
        tolerance.floor,
    )
    return RankTolerance(
        payload,
        tolerance.bound("trainer"),
        tolerance.bound("residual"),
        rounds,
        tolerance.bound("round_start"),
    )


class RankJudgement(NamedTuple):
    passed: bool | None  # None: the unit cannot be judged, nothing is posted
    reason: str
    recomputed_state_hash: str | None = None
    # a DiLoCo round judged within bounds: how (verifier.recompute.Verdict's `judgement`)
    judgement: dict[str, Any] | None = None


def judge_rank(
    spec: JobSpec,
    slot: int,
    index: int,
    committed: str,
    bundle: bytes,
    peers: Mapping[int, tuple[str, bytes]] | None = None,
    previous: tuple[str, bytes] | None = None,
    *,
    reproduces: Reproduces = lambda _: True,
    tolerance: RankTolerance | None = None,
    states: StateSource = lambda _: None,
) -> RankJudgement:
    """Whether the bundle committed as unit `index` of `slot` reproduces the hash `committed`
    from where the rank was left, and in ddp whether its records agree with the group's.

    `peers` maps the other slots that committed the same unit to their commitment and bundle;
    `previous` is the slot's commitment and bundle of unit `index - 1` (ddp). A ddp unit whose
    recorded class `reproduces` says no to is judged within `tolerance` (default: the
    calibrated `rank_tolerance()`) rather than by its hash, and so is a DiLoCo round that
    records its segments, whose states `states` fetches.
    """
    try:
        config = group_config(spec)
    except DistributedConfigError as exc:
        return RankJudgement(None, f"the job spec cannot be run: {exc}")
    try:
        loaded = load_rank_bundle(bundle)
    except ValueError as exc:
        return RankJudgement(False, f"committed rank bundle unreadable: {exc}")
    unit, payload, rounds = loaded.unit, loaded.payload, loaded.rounds
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
        reason = contradiction(slot, config.unit_rounds(spec, index), views, config.EXCHANGE)
        if reason is not None:
            return RankJudgement(False, reason)
    diloco = isinstance(config, DilocoConfig)
    if diloco:
        problem = _round_records_problem(loaded)
        if problem is not None:
            return RankJudgement(False, problem)
    if rounds is not None and not reproduces(recorded_class(loaded)):
        tolerance = tolerance or rank_tolerance()
        if isinstance(config, DilocoConfig):
            return _judge_round_within(spec, config, loaded, tolerance, previous, states)
        return _judge_within(spec, config, loaded, own, tolerance, previous)
    try:
        rerun = run_rank_unit(spec, config, unit, rounds)
        recomputed = rerun.sha256
    # rounds missing or contradicting the re-run (ReplayMismatch), inputs that do not load
    except BAD_INPUTS as exc:
        return RankJudgement(False, f"the bundle cannot be re-run: {exc}")
    if recomputed != committed:
        return RankJudgement(False, "the re-run unit sends a different payload", recomputed)
    if diloco and rerun.segments != [_without_cid(s) for s in loaded.segments or ()]:
        return RankJudgement(False, "the re-run round commits to other segments", recomputed)
    misplaced = _misplaced_start(spec, config, unit, previous, states)
    if misplaced is not None:
        return RankJudgement(False, misplaced, recomputed)
    return RankJudgement(True, "the re-run unit sends the committed payload", recomputed)


def _round_records_problem(bundle: RankBundle) -> str | None:
    """Why a DiLoCo round's bundle does not record what judging it and the slot's next round
    needs: its exchange, with the rank's own payload as it committed it, and its segments;
    None when it does (the records' form is checked where they are used)."""
    if bundle.rounds is None or bundle.segments is None:
        return "the round's bundle does not record its exchange and its segments"
    members, payloads = bundle.rounds[0]
    rank = bundle.unit.rank
    if rank in members and payloads[members.index(rank)] != bundle.payload:
        return "the round records another payload from the rank than it sent"
    return None


def _without_cid(segment: Any) -> Any:
    """A segment record as a re-run commits to it, without the CID its provider pinned it by."""
    return (
        {k: v for k, v in segment.items() if k != "cid"} if isinstance(segment, dict) else segment
    )


def recorded_class(bundle: RankBundle) -> str | None:
    """The id of the class a bundle records; None when it records none well-formed."""
    try:
        return ExecutionClass.from_dict(bundle.execution).class_id()
    except ExecutionClassError:
        return None


def _judge_within(
    spec: JobSpec,
    config: GroupConfig,
    bundle: RankBundle,
    own: MemberView | None,
    tolerance: RankTolerance,
    previous: tuple[str, bytes] | None,
) -> RankJudgement:
    """A ddp unit of a class this verifier does not reproduce: every step's committed payload
    explained within the tolerance by the verifier's re-run, which follows the group's recorded
    aggregates; and the unit starting, within it, where the previous one ends."""
    if own is None or bundle.rounds is None:
        return RankJudgement(False, "the payload does not split into the unit's steps")
    try:
        replay_within(spec, config, bundle.unit, bundle.rounds, own.sent, tolerance.payload)
    except RankCheat as exc:
        return RankJudgement(False, f"the re-run does not explain the committed payload: {exc}")
    except BAD_INPUTS as exc:  # e.g. a recorded payload that does not parse (CompressionError)
        return RankJudgement(False, f"the bundle cannot be re-run: {exc}")
    misplaced = _misplaced_start(spec, config, bundle.unit, previous, tolerance=tolerance)
    if misplaced is not None:
        return RankJudgement(False, misplaced)
    return RankJudgement(True, "the re-run explains every committed payload within the slack")


def _judge_round_within(
    spec: JobSpec,
    config: DilocoConfig,
    bundle: RankBundle,
    tolerance: RankTolerance,
    previous: tuple[str, bytes] | None,
    states: StateSource,
) -> RankJudgement:
    """A DiLoCo round of a class this verifier does not reproduce: its local steps judged by
    their segment records as a single node's unit is (verifier.trajectory: a whole re-run, a
    disagreement narrowed to one segment re-run alone from the provider's state), its payload a
    compression, within one step's slack, of what the round's committed end makes, and its
    start, within the tolerance, where the slot's previous round leaves it."""
    unit, segments = bundle.unit, bundle.segments
    boundaries = config.segment_ends(spec, unit.round_)
    begins = unit.round_ * config.steps_per_unit(spec)
    problem = records_problem(segments, boundaries)
    if problem is not None:
        return RankJudgement(False, problem)
    assert segments is not None  # well-formed records
    end = _committed_end(segments, states)
    if end is None:
        return RankJudgement(False, "the round's end state is not available or not what it names")
    start = Checkpoint(unit.trainer)
    try:
        # the round's end as a unit's committed checkpoint: its trace binds every record, the
        # last one (which names this state, so was recorded after it) included
        end.state["trace"] = [*end.state["trace"], trace.leaf(segments[-1])]
        end.metadata = {"trace": {"segments": segments}}
        if start.step != begins:
            return RankJudgement(False, f"the round does not start at step {begins}")
        rerun = round_rerun(spec, config, unit.rank)
        judged = judge_trajectory(spec, start, end, boundaries, states, tolerance.rounds, rerun)
    except BAD_INPUTS as exc:
        return RankJudgement(False, f"the round cannot be re-run from the bundle: {exc}")
    how = {
        "mode": "tolerant",
        "segment": judged.segment,
        "steps_run": judged.steps_run,
        "decisive_share_of_bound": judged.decisive,
        "worst_share_of_bound": judged.worst,
    }
    if not judged.passed:
        return RankJudgement(False, f"the round's local steps: {judged.reason}", None, how)
    problem = _payload_problem(spec, config, bundle, end, tolerance)
    if problem is None:
        problem = _misplaced_start(spec, config, unit, previous, states, tolerance)
    if problem is not None:
        return RankJudgement(False, problem, None, how)
    return RankJudgement(True, "the round's steps and payload are within bounds", None, how)


def _payload_problem(
    spec: JobSpec,
    config: DilocoConfig,
    bundle: RankBundle,
    end: Checkpoint,
    tolerance: RankTolerance,
) -> str | None:
    """Why the round's committed payload is not a compression, within one step's slack, of
    what the round's committed `end` makes; None when it is."""
    try:
        _, vector = round_vector(spec, config, bundle.unit, end.state["model"])
        payload = config.compressor.parse(bundle.payload, vector.numel())
    except BAD_INPUTS as exc:  # a residual or payload that does not fit
        return f"the payload cannot be checked: {exc}"
    slack = tolerance.payload.at(1) * rms(vector)
    why = config.compressor.explains(payload, vector, slack, bundle.unit.round_)
    return None if why is None else f"the payload is not what the round's end makes: {why}"


def round_rerun(
    spec: JobSpec,
    config: DilocoConfig,
    rank: int,
    threads: int = 1,
    on_segment: SegmentSink | None = None,
) -> Rerun:
    """A DiLoCo rank's local steps re-run in this verifier's class (with `threads` threads;
    ranks train with one), committing to segments as its rounds do (diloco.local_round);
    `on_segment` receives each with its state."""
    steps = config.steps_per_unit(spec)
    every = trace.segment_length(steps)

    def rerun(origin: Checkpoint | None, length: int) -> Ran:
        with rank_threads():
            trainer, _ = rank_trainer(spec, rank, threads)
            if origin is not None:
                trainer.load(origin.state)
            if trainer.step % steps == 0:  # a round's start: its trace restarts
                trainer.trace = []
            losses, segments = local_steps(trainer, trainer.step + length, every, on_segment)
            return Ran(Checkpoint(trainer.state()), segments, losses)

    return rerun


def replay_within(
    spec: JobSpec,
    config: GroupConfig,
    unit: RankUnit,
    rounds: list[RecordedRound],
    sent: list[bytes],
    slack: Slack,
) -> RankUnit:
    """Re-run a ddp unit judging each step's payload in `sent` within `slack` (RankCheat at the
    first it does not explain); where the unit leaves the rank."""
    return replay_ddp_unit(
        spec, config, unit, TolerantReplay(unit.rank, config, rounds, sent, slack)
    )


def _misplaced_start(
    spec: JobSpec,
    config: GroupConfig,
    unit: RankUnit,
    previous: tuple[str, bytes] | None,
    states: StateSource = lambda _: None,
    tolerance: RankTolerance | None = None,
) -> str | None:
    """Why the unit does not start where the rank was left; None when it does, or when that
    cannot be told (no previous bundle, or one that fails its own verification). With a
    `tolerance`, the start is compared within it (and a ddp unit's previous one re-run within
    it too); without, to the bit."""
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
    if isinstance(config, DilocoConfig):
        following = where_round_leaves(spec, config, before, states)
    else:
        following = _where_unit_leaves(spec, config, before, commitment, tolerance)
    if following is None:
        return None
    if tolerance is None:
        ends = following.state_hash() == unit.state_hash()
    elif isinstance(config, DilocoConfig):
        ends = max(start_gaps(following, unit)) <= tolerance.round_start
    else:
        trainer, residual = start_gaps(following, unit)
        ends = trainer <= tolerance.trainer and residual <= tolerance.residual
    if not ends:
        return "the unit does not start where the slot's previous unit ends"
    return None


def _where_unit_leaves(
    spec: JobSpec,
    config: GroupConfig,
    before: RankBundle,
    commitment: str,
    tolerance: RankTolerance | None,
) -> RankUnit | None:
    """The inputs of the unit after the ddp unit `before`, by re-running it (within the
    tolerance, if given); None when it fails its own verification."""
    assert before.rounds is not None  # a ddp unit's steps
    if tolerance is None:
        try:
            rerun = run_rank_unit(spec, config, before.unit, before.rounds)
        except BAD_INPUTS:
            return None
        return rerun.following if rerun.sha256 == commitment else None
    sent = member_view(before.payload, before.rounds)
    if sent is None:
        return None
    try:
        return replay_within(spec, config, before.unit, before.rounds, sent.sent, tolerance.payload)
    except BAD_INPUTS:  # the previous unit fails its own verification
        return None


def _committed_end(segments: list[dict[str, Any]], states: StateSource) -> Checkpoint | None:
    """The state a round's last (well-formed) record names, fetched; None when it cannot be had
    or is not the state the record's hash names."""
    end = states(segments[-1])
    return None if end is None or end.state_hash() != segments[-1]["state_hash"] else end


def where_round_leaves(
    spec: JobSpec, config: DilocoConfig, before: RankBundle, states: StateSource
) -> RankUnit | None:
    """The inputs of the round after the DiLoCo round `before`, rebuilt from its committed end
    state and recorded exchange (`following_round`); None when it fails its own verification
    (its end is withheld, or its records are malformed)."""
    segments = before.segments
    boundaries = config.segment_ends(spec, before.unit.round_)
    if before.rounds is None or records_problem(segments, boundaries) is not None:
        return None
    assert segments is not None  # well-formed records
    end = _committed_end(segments, states)
    if end is None:
        return None
    after = end.state | {"trace": [*end.state["trace"], trace.leaf(segments[-1])]}
    try:
        return following_round(spec, config, before.unit, after, before.payload, before.rounds[0])
    except BAD_INPUTS:
        return None


def start_gaps(ours: RankUnit, theirs: RankUnit) -> tuple[float, float]:
    """How far apart two inputs of a rank's unit are: their trainers' states (and outer
    momentum) and their residuals (`state_gap`); inf for both when they are not the same rank's
    same unit."""
    if (ours.rank, ours.round_) != (theirs.rank, theirs.round_):
        return math.inf, math.inf
    trainer = state_gap([ours.trainer, ours.momentum], [theirs.trainer, theirs.momentum])
    return trainer, state_gap(ours.residual, theirs.residual)


def state_gap(ours: Any, theirs: Any) -> float:
    """How far apart two states are: the largest difference of a float tensor's entries over
    that tensor's RMS in `ours` (in `theirs` where ours is zero), or of a float over its size
    (the losses a trainer keeps); inf when anything else differs (structure, shapes, integers)."""
    if isinstance(ours, Mapping) and isinstance(theirs, Mapping):
        if ours.keys() != theirs.keys():
            return math.inf
        return max((state_gap(ours[key], theirs[key]) for key in ours), default=0.0)
    if isinstance(ours, (list, tuple)) and isinstance(theirs, (list, tuple)):
        if len(ours) != len(theirs):
            return math.inf
        return max((state_gap(a, b) for a, b in zip(ours, theirs, strict=True)), default=0.0)
    if isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor):
        if (ours.shape, ours.dtype) != (theirs.shape, theirs.dtype):
            return math.inf
        if not ours.is_floating_point():
            return 0.0 if torch.equal(ours, theirs) else math.inf
        if ours.numel() == 0 or torch.equal(ours, theirs):
            return 0.0
        # over theirs where ours is all zeros (an entry no exchange has moved yet)
        scale = rms(ours) or rms(theirs)
        gap = float((ours.double() - theirs.double()).abs().max()) / scale
        return gap if math.isfinite(gap) else math.inf
    if isinstance(ours, float) and isinstance(theirs, float):  # a loss in the history
        if ours == theirs:
            return 0.0
        gap = abs(ours - theirs) / abs(ours) if ours else math.inf
        return gap if math.isfinite(gap) else math.inf
    return 0.0 if type(ours) is type(theirs) and ours == theirs else math.inf


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

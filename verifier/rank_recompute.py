"""Judge one rank's unit of a group job: re-run it from its pinned bundle, compare hashes.

A group job's unit is a rank's DiLoCo round or ddp unit: its CID names a rank bundle
(marketplace/protocol/rank_bundle.py), its state hash is the sha256 of the payloads the rank
sent. Re-running the unit from the bundle on the CPU gives the payloads an honest rank sent,
bit for bit, so a rank that sent anything else is named by its own commitment. In ddp the
bundle also records each step's members and their payloads, which the re-run aggregates as the
rank did; a record of the rank's own payload that is not what its re-run sends fails the unit,
and so do records the signatures they carry give the lie to (`group_records`): a payload of
another member that it did not sign, or one the rank signed and sent but did not commit.

A unit must also start where the rank was left: unit 0 from the job's seed, a ddp unit where
the re-run of the slot's previous unit ends, and a later DiLoCo round where the slot's previous
round leaves it: its committed end state, the residual its payload leaves, and the outer step
on the aggregate of what that round's members sent, as its bundle records them. So a round
fails unless its successor's start can be rebuilt from it, and a unit fails when its own
provider's previous unit cannot be rebuilt. Whatever a bundle's inputs raise when re-run or
rebuilt fails its unit: the bundle is its provider's own commitment. The job's last unit's
bundle holds the trained model the user gets: it must be where the re-run leaves the rank.

A verifier that does not reproduce the rank's recorded execution class judges the unit within
calibrated bounds instead. A ddp unit step by step (`TolerantReplay`): the committed payload
must be a compression of a vector within the slack of the verifier's own in every entry, and
each residual committed inside the unit within a gap of the re-run's, which goes on from it. A
DiLoCo round by the segments its local steps committed to, as a single node's unit is judged
(verifier.trajectory), and its payload against what the round's committed end makes (see
docs/verification.md).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import torch

from marketplace.protocol import trace
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.execution import ExecutionClass, ExecutionClassError
from marketplace.protocol.rank_bundle import (
    DDP_RESIDUAL_EVERY,
    RankBundle,
    RankUnit,
    RecordedRound,
    load_rank_bundle,
    update_sha256,
)
from marketplace.protocol.round_signatures import RoundSigners
from marketplace.protocol.units import is_last_unit
from marketplace.storage import StorageError
from node.distributed.ddp import replay_ddp_unit
from node.distributed.diloco import DilocoConfig, following_round, local_steps, round_vector
from node.distributed.exchange import RankCheat, TolerantReplay, rms
from node.distributed.group import DistributedConfigError, GroupConfig, rank_trainer
from node.distributed.job import first_unit, group_config, run_rank_unit
from node.distributed.rank_unit import inputs_problem, rank_threads, residuals_problem
from node.engine import JobSpec
from node.engine.unit import SegmentSink
from verifier.errors import VerifierError
from verifier.group_records import MemberView, member_view, record_problem
from verifier.trajectory import (
    MEASURES,
    Ran,
    Rerun,
    StateSource,
    Tolerance,
    judge_trajectory,
    records_problem,
)

log = logging.getLogger(__name__)

Reproduces = Callable[[str | None], bool]  # whether a verifier re-runs a class id bit for bit
RANK_TOLERANCE_FILE = Path(__file__).with_name("rank_tolerance.json")
# what a rank of another class may need: each step's payload, a share of the step's vector's
# RMS; a unit's start against the re-run of the one before: its trainer's state and its residual,
# each a share of every tensor's RMS; a DiLoCo round's segment ends, by the distances a single
# node's unit is judged by (verifier.trajectory.MEASURES); a later round's start against its
# rebuild from the round before, as the trainer's and residual's gaps are measured
ROUND_MEASURES = {f"round_{m}": m for m in MEASURES}
RANK_MEASURES = ("payload", "trainer", "residual", *ROUND_MEASURES, "round_start")
# what re-running from a bundle's inputs is known to raise when they are not what a rank saves;
# whatever else they raise fails their unit too, and is logged, as it may be this verifier's bug
BAD_INPUTS = (ValueError, KeyError, TypeError, RuntimeError)
# what fetching a unit's inputs raises: nothing said of the bundle, so recompute retries it (or
# judges it withheld)
FETCHING = (VerifierError, StorageError)


class Unrebuilt(ValueError):
    """A unit the slot's next unit's start cannot be rebuilt from: it fails its own
    verification, and a next unit of the same provider fails with it."""


class RankTolerance(NamedTuple):
    payload: float  # a ddp step's slack, a share of the vector's RMS; a DiLoCo round payload's
    trainer: float
    residual: float
    rounds: Tolerance  # a DiLoCo round's segment ends, measured as a single node's unit's are
    round_start: float  # a later DiLoCo round's start: its trainer's gap and its residual's


def rank_tolerance(tolerance: Tolerance | None = None) -> RankTolerance:
    """How far a rank of another class may be from a verifier's re-run: the bounds of the
    calibrated table (scripts/calibrate_rank_verification.py). ValueError for a table whose
    ddp payloads were measured over fewer steps than a re-run goes between committed residuals:
    its bounds would not hold."""
    tolerance = tolerance or Tolerance.load(RANK_TOLERANCE_FILE, RANK_MEASURES)
    if (steps := len(tolerance.measured["payload"])) < DDP_RESIDUAL_EVERY:
        raise ValueError(
            f"the rank table measured ddp re-runs of {steps} steps, and one goes "
            f"{DDP_RESIDUAL_EVERY} steps between committed residuals"
        )
    rounds = Tolerance(
        {m: tolerance.measured[key] for key, m in ROUND_MEASURES.items()},
        tolerance.margin,
        tolerance.floor,
    )
    return RankTolerance(
        tolerance.bound("payload"),
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
    signers: RoundSigners,
    reproduces: Reproduces = lambda _: True,
    tolerance: RankTolerance | None = None,
    states: StateSource = lambda _: None,
    previous_states: StateSource | None = None,
    own_previous: bool = False,
) -> RankJudgement:
    """Whether the bundle committed as unit `index` of `slot` reproduces the hash `committed`
    from where the rank was left, and whether its records hold what the group sent.

    `signers` names the job and the address that committed each slot's unit `index`, this
    one's included: what the members of its exchanges signed. `peers` maps the other slots
    that committed the same unit to their commitment and bundle; `previous` is the slot's
    commitment and bundle of unit `index - 1`, which `own_previous`
    says this unit's provider committed too (the slot was not handed over between them): then
    a previous unit its next one's start cannot be rebuilt from fails this one. A unit whose
    recorded class `reproduces` says no to is judged within `tolerance` (default: the
    calibrated `rank_tolerance()`) rather than by its hash; a DiLoCo round's segment states
    are what `states` fetches, and its previous round's end what `previous_states` does
    (default: `states`).
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
    problem = inputs_problem(spec, unit) or _residuals_problem(spec, config, loaded)
    if problem is not None:
        return RankJudgement(False, problem)
    if update_sha256(payload) != committed:
        return RankJudgement(False, "the pinned payload is not the committed one")
    expected = len(config.unit_rounds(spec, index))
    if rounds is not None and len(rounds) != expected:
        return RankJudgement(False, f"the bundle records {len(rounds)} rounds, not {expected}")
    problem = None if rounds is None else _members_problem(config, rounds)
    if problem is not None:
        return RankJudgement(False, problem)
    own = None if rounds is None else member_view(payload, rounds)
    if own is not None:  # a payload that does not split fails its re-run below
        views = _peer_views(config, index, own, peers or {}) | {slot: own}
        exchanges = config.unit_rounds(spec, index)
        reason = record_problem(slot, exchanges, views, signers, config.EXCHANGE)
        if reason is not None:
            return RankJudgement(False, reason)
    diloco = isinstance(config, DilocoConfig)
    if diloco:
        problem = _round_records_problem(loaded)
        if problem is not None:
            return RankJudgement(False, problem)
    before = (
        None
        if previous is None
        else Previous(*previous, own_previous, previous_states or states, signers)
    )
    if rounds is not None and not reproduces(recorded_class(loaded)):
        tolerance = tolerance or rank_tolerance()
        if isinstance(config, DilocoConfig):
            return _judge_round_within(spec, config, loaded, tolerance, before, states)
        return _judge_within(spec, config, loaded, own, tolerance, before)
    ends: dict[str, Checkpoint] = {}  # the re-run's last segment state, by its hash

    def keep_last(record: dict[str, Any], state: Checkpoint) -> None:
        ends.clear()
        ends[record["state_hash"]] = state

    try:
        rerun = run_rank_unit(spec, config, unit, rounds, keep_last)
    # rounds missing or contradicting the re-run (ReplayMismatch), inputs that do not load
    except Exception as exc:  # noqa: BLE001 - whatever they raise fails the unit (_unrunnable)
        return RankJudgement(False, f"the bundle cannot be re-run: {_unrunnable(exc)}")
    recomputed = rerun.sha256
    if recomputed != committed:
        return RankJudgement(False, "the re-run unit sends a different payload", recomputed)
    if diloco and rerun.segments != [_without_cid(s) for s in loaded.segments or ()]:
        return RankJudgement(False, "the re-run round commits to other segments", recomputed)
    if not all(map(torch.equal, rerun.residuals, loaded.residuals)):
        return RankJudgement(False, "the re-run unit commits to other residuals", recomputed)
    misplaced = _misplaced_start(spec, config, unit, before)
    if misplaced is not None:
        return RankJudgement(False, misplaced, recomputed)
    following = rerun.following
    if isinstance(config, DilocoConfig):
        try:  # its end is the re-run's, to the bit: it commits to the very same segments
            following = where_round_leaves(
                spec, config, loaded, lambda record: ends.get(record["state_hash"])
            )
        except Unrebuilt as exc:
            return RankJudgement(False, _unrebuilt_round(exc), recomputed)
    assert following is not None  # a ddp re-run's, or the rebuilt start of the next round
    problem = _weights_problem(spec, loaded, following, 0.0)
    if problem is not None:
        return RankJudgement(False, problem, recomputed)
    return RankJudgement(True, "the re-run unit sends the committed payload", recomputed)


class Previous(NamedTuple):
    """The slot's unit before the one judged, where that one must start."""

    commitment: str
    data: bytes  # its bundle
    own: bool  # committed by the judged unit's provider, who answers for it
    states: StateSource  # fetches its DiLoCo round's states, its end's
    signers: RoundSigners  # who signs the group's payloads, as for the judged unit


def _weights_problem(
    spec: JobSpec, bundle: RankBundle, following: RankUnit, bound: float
) -> str | None:
    """Why the trained model a bundle holds is not the one its unit leaves the rank with: only
    the job's last unit holds one (job.unit_bundle), and the user's model is read from it
    (units.RankBundleUnits.trained_model), so it must be the weights of `following`, where the
    re-run leaves the rank, within `bound` of them as `state_gap` measures (0: to the bit).
    None when it is, or when the unit is not the last and holds none."""
    last = is_last_unit(spec, bundle.unit.round_)
    if bundle.weights is None:
        return "the job's last unit holds no trained model" if last else None
    if not last:
        return "the bundle holds a trained model, but its unit is not the job's last"
    if state_gap(following.trainer["model"], bundle.weights) > bound:
        return "the bundle's trained model is not where the unit leaves the rank"
    return None


def _members_problem(config: GroupConfig, rounds: list[RecordedRound]) -> str | None:
    """Why a bundle's exchanges are not made up of the group's ranks (distinct, as its loader
    checks): a member outside the group, or none at all, whose payloads would make an aggregate
    of the provider's choosing; None when they are."""
    for members, *_ in rounds:
        if not members or max(members) >= config.ranks:
            return f"an exchange records {members} as its members, not ranks of the group"
    return None


def _unrunnable(exc: Exception) -> str:
    """What a bundle's inputs raising `exc` when re-run or rebuilt says of them, for a verdict
    that fails their unit. A failure to fetch is raised again (it says nothing of the bundle);
    one that re-running such inputs is not known to raise is logged, as it may be a bug here."""
    if isinstance(exc, FETCHING):
        raise exc
    if not isinstance(exc, BAD_INPUTS):
        log.warning("a rank bundle's inputs raised %s", type(exc).__name__, exc_info=exc)
    return str(exc) or type(exc).__name__


@contextmanager
def _rebuilding() -> Iterator[None]:
    """Whatever rebuilding a unit's successor's start from its provider's bytes raises, as
    Unrebuilt (a failure to fetch aside)."""
    try:
        yield
    except Unrebuilt:
        raise
    except Exception as exc:
        raise Unrebuilt(_unrunnable(exc)) from exc


def _unrebuilt_round(exc: Unrebuilt) -> str:
    return f"the slot's next round cannot be rebuilt from the round: {exc}"


def _round_records_problem(bundle: RankBundle) -> str | None:
    """Why a DiLoCo round's bundle does not record what judging it and the slot's next round
    needs: its exchange, with the rank's own payload as it committed it, and its segments;
    None when it does (the records' form is checked where they are used)."""
    if bundle.rounds is None or bundle.segments is None:
        return "the round's bundle does not record its exchange and its segments"
    members, payloads, _ = bundle.rounds[0]
    rank = bundle.unit.rank
    if rank in members and payloads[members.index(rank)] != bundle.payload:
        return "the round records another payload from the rank than it sent"
    return None


def _without_cid(segment: Any) -> Any:
    """A segment record as a re-run commits to it, without the CID its provider pinned it by."""
    return (
        {k: v for k, v in segment.items() if k != "cid"} if isinstance(segment, dict) else segment
    )


def _residuals_problem(spec: JobSpec, config: GroupConfig, bundle: RankBundle) -> str | None:
    """Why the residuals a bundle commits inside its unit are not those its rank commits."""
    return residuals_problem(spec, bundle.residuals, len(config.residual_steps(spec)))


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
    previous: Previous | None,
) -> RankJudgement:
    """A ddp unit of a class this verifier does not reproduce: every step's committed payload
    explained within the tolerance by the verifier's re-run, which follows the group's recorded
    aggregates; and the unit starting, within it, where the previous one ends."""
    if own is None or bundle.rounds is None:
        return RankJudgement(False, "the payload does not split into the unit's steps")
    try:
        following = replay_within(spec, config, bundle, own.sent, tolerance)
    except RankCheat as exc:
        return RankJudgement(False, f"the re-run does not explain the committed payload: {exc}")
    # e.g. a recorded payload that does not parse (CompressionError)
    except Exception as exc:  # noqa: BLE001 - whatever it raises fails the unit (_unrunnable)
        return RankJudgement(False, f"the bundle cannot be re-run: {_unrunnable(exc)}")
    problem = _misplaced_start(spec, config, bundle.unit, previous, tolerance=tolerance)
    if problem is None:
        problem = _weights_problem(spec, bundle, following, tolerance.trainer)
    if problem is not None:
        return RankJudgement(False, problem)
    return RankJudgement(True, "the re-run explains every committed payload within the slack")


def _judge_round_within(
    spec: JobSpec,
    config: DilocoConfig,
    bundle: RankBundle,
    tolerance: RankTolerance,
    previous: Previous | None,
    states: StateSource,
) -> RankJudgement:
    """A DiLoCo round of a class this verifier does not reproduce: its local steps judged by
    their segment records as a single node's unit is (verifier.trajectory: a whole re-run, a
    disagreement narrowed to one segment re-run alone from the provider's state), its payload a
    compression, within one step's slack, of what the round's committed end makes, its start,
    within the tolerance, where the slot's previous round leaves it, and its successor's start
    rebuilt from it."""
    unit, segments = bundle.unit, bundle.segments
    boundaries = config.segment_ends(spec, unit.round_)
    begins = unit.round_ * config.steps_per_unit(spec)
    try:
        problem = records_problem(segments, boundaries)
        if problem is not None:
            return RankJudgement(False, problem)
        assert segments is not None  # well-formed records
        end = _committed_end(segments, states)
        if end is None:
            return RankJudgement(
                False, "the round's end state is not available or not what it names"
            )
        start = Checkpoint(unit.trainer)
        if start.step != begins:
            return RankJudgement(False, f"the round does not start at step {begins}")
        rerun = round_rerun(spec, config, unit.rank)
        judged = judge_trajectory(spec, start, end, boundaries, states, tolerance.rounds, rerun)
    except Exception as exc:  # noqa: BLE001 - whatever it raises fails the unit (_unrunnable)
        return RankJudgement(
            False, f"the round cannot be re-run from the bundle: {_unrunnable(exc)}"
        )
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
        problem = _misplaced_start(spec, config, unit, previous, tolerance)
    if problem is None:
        try:
            following = _following(spec, config, bundle, end)
        except Unrebuilt as exc:
            problem = _unrebuilt_round(exc)
        else:
            problem = _weights_problem(spec, bundle, following, tolerance.round_start)
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
    # a residual or payload that does not fit
    except Exception as exc:  # noqa: BLE001 - whatever it raises fails the unit (_unrunnable)
        return f"the payload cannot be checked: {_unrunnable(exc)}"
    slack = tolerance.payload * rms(vector)
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
    round_steps = config.steps_per_unit(spec)
    every = trace.segment_length(round_steps)

    def rerun(origin: Checkpoint | None, steps: int, skip: int = 0) -> Ran:
        with rank_threads():
            trainer, _ = rank_trainer(spec, rank, threads)
            if origin is not None:
                trainer.load(origin.state)
            trainer.cursor += skip
            if trainer.step % round_steps == 0:  # a round's start: its trace restarts
                trainer.trace = []
            losses, segments = local_steps(trainer, trainer.step + steps, every, on_segment)
            return Ran(Checkpoint(trainer.state()), segments, losses)

    return rerun


def replay_within(
    spec: JobSpec,
    config: GroupConfig,
    bundle: RankBundle,
    sent: list[bytes],
    tolerance: RankTolerance,
) -> RankUnit:
    """Re-run a ddp bundle's unit judging each step's payload in `sent` within the tolerance's
    slack, and each residual the bundle commits inside the unit within its residual gap, going
    on from the committed one (RankCheat at the first it does not explain); where the unit
    leaves the rank."""
    assert bundle.rounds is not None  # a ddp bundle's
    unit, ends = bundle.unit, config.residual_steps(spec)

    def judged(index: int, residual: torch.Tensor) -> torch.Tensor:
        committed = bundle.residuals[index]
        gap = state_gap(residual, committed)
        if gap > tolerance.residual:
            step = config.unit_rounds(spec, unit.round_)[ends[index] - 1]
            raise RankCheat(
                f"round {step}: the residual committed after it is {gap:.3g} of its RMS from "
                f"the re-run's (bound {tolerance.residual:.3g})"
            )
        return committed.clone()

    exchange = TolerantReplay(unit.rank, config, bundle.rounds, sent, tolerance.payload)
    return replay_ddp_unit(spec, config, unit, exchange, at_residual=judged)


def _misplaced_start(
    spec: JobSpec,
    config: GroupConfig,
    unit: RankUnit,
    previous: Previous | None,
    tolerance: RankTolerance | None = None,
) -> str | None:
    """Why the unit does not start where the rank was left; None when it does, or when that
    cannot be told beyond its place in the job (`_stray_start`): no previous bundle, or another
    provider's that its next unit's start cannot be rebuilt from (it fails its own
    verification; the slot's new provider did not commit it).
    With a `tolerance`, the start is compared within it (and a ddp unit's previous one re-run
    within it too); without, to the bit."""
    if unit.round_ == 0:
        if unit.state_hash() != first_unit(spec, unit.rank).state_hash():
            return "the unit does not start from the job's seed"
        return None
    stray = _stray_start(spec, config, unit)
    if stray is not None or previous is None:
        return stray
    try:
        following = _where_previous_leaves(spec, config, unit, previous, tolerance)
    except Unrebuilt as exc:
        if previous.own:
            return f"the slot's previous unit, the provider's own, cannot be rebuilt: {exc}"
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


def _stray_start(spec: JobSpec, config: GroupConfig, unit: RankUnit) -> str | None:
    """Why the unit's start is not at its rank's place in the job, whatever its previous unit:
    its step must be the unit's first, its data the rank's own shard, and its cursor at or past
    that step (a rank draws one batch a step, more past a spike). Held even where the previous
    unit cannot be rebuilt, or a slot's new provider could start from a copy of an earlier
    state, its segments included, and train nothing."""
    progress = unit.trainer.get("progress")
    begins = unit.round_ * config.steps_per_unit(spec)
    if not (
        isinstance(progress, dict)
        and progress.get("step") == begins
        and progress.get("stream") == unit.rank
        and isinstance(progress.get("cursor"), int)
        and progress["cursor"] >= begins
    ):
        return "the unit does not start at its rank's step, shard and data position"
    return None


def _where_previous_leaves(
    spec: JobSpec,
    config: GroupConfig,
    unit: RankUnit,
    previous: Previous,
    tolerance: RankTolerance | None,
) -> RankUnit:
    """The inputs of `unit` as the slot's previous unit leaves them; Unrebuilt when they cannot
    be rebuilt from it."""
    before = _committed_bundle(previous.data, unit.rank, unit.round_ - 1, previous.commitment)
    if before is None:
        raise Unrebuilt("its bundle is not the rank's previous unit under its commitment")
    problem = inputs_problem(spec, before.unit) or _unsigned_record(spec, config, before, previous)
    if problem is not None:
        raise Unrebuilt(problem)
    if isinstance(config, DilocoConfig):
        return where_round_leaves(spec, config, before, previous.states)
    return _where_unit_leaves(spec, config, before, previous.commitment, tolerance)


def _unsigned_record(
    spec: JobSpec, config: GroupConfig, before: RankBundle, previous: Previous
) -> str | None:
    """Why the previous unit's records, which the judged unit's start is rebuilt from, hold a
    payload from another member that no holder of its slot signed (`record_problem`, on the
    unit's own records alone); None when they do not. A record made up in a unit that was not
    sampled would otherwise move its next unit's start unchecked."""
    exchanges = config.unit_rounds(spec, before.unit.round_)
    own = None if before.rounds is None else member_view(before.payload, before.rounds)
    if own is None or len(own.rounds) != len(exchanges):
        return None  # malformed: rebuilding it fails on its own
    problem = record_problem(
        before.unit.rank, exchanges, {before.unit.rank: own}, previous.signers, config.EXCHANGE
    )
    return None if problem is None else f"its records fail it: {problem}"


def _where_unit_leaves(
    spec: JobSpec,
    config: GroupConfig,
    before: RankBundle,
    commitment: str,
    tolerance: RankTolerance | None,
) -> RankUnit:
    """The inputs of the unit after the ddp unit `before`, by re-running it (within the
    tolerance, if given); Unrebuilt when it fails its own verification."""
    if before.rounds is None:
        raise Unrebuilt("its bundle records none of its steps")
    problem = _members_problem(config, before.rounds) or _residuals_problem(spec, config, before)
    sent = member_view(before.payload, before.rounds)
    if problem is not None or sent is None:
        raise Unrebuilt(problem or "its payload does not split into its steps")
    with _rebuilding():
        if tolerance is not None:
            return replay_within(spec, config, before, sent.sent, tolerance)
        rerun = run_rank_unit(spec, config, before.unit, before.rounds)
        if rerun.sha256 != commitment or rerun.following is None:
            raise Unrebuilt("its re-run sends another payload than it committed")
        return rerun.following


def _committed_end(segments: list[dict[str, Any]], states: StateSource) -> Checkpoint | None:
    """The state a round's last (well-formed) record names, fetched, as a unit's committed
    checkpoint: its trace binds every record, the last one (which names this state, so was
    recorded after it) included. None when it cannot be had or is not the state the record's
    hash names."""
    end = states(segments[-1])
    if end is None or end.state_hash() != segments[-1]["state_hash"]:
        return None
    end.state["trace"] = [*end.state["trace"], trace.leaf(segments[-1])]
    end.metadata = {"trace": {"segments": segments}}
    return end


def where_round_leaves(
    spec: JobSpec, config: DilocoConfig, before: RankBundle, states: StateSource
) -> RankUnit:
    """The inputs of the round after the DiLoCo round `before`, rebuilt from its committed end
    state (fetched by `states`) and recorded exchange; Unrebuilt when they cannot be: its
    records malformed, its end withheld or not the state its last record names."""
    with _rebuilding():
        segments = before.segments
        if records_problem(segments, config.segment_ends(spec, before.unit.round_)) is not None:
            raise Unrebuilt("its bundle records no well-formed segments")
        assert segments is not None  # well-formed records
        end = _committed_end(segments, states)
    if end is None:
        raise Unrebuilt("its end state is not available or not what its last record names")
    return _following(spec, config, before, end)


def _following(
    spec: JobSpec, config: DilocoConfig, before: RankBundle, end: Checkpoint
) -> RankUnit:
    """The inputs of the round after `before`, from its committed `end` (`_committed_end`): the
    residual its payload leaves and the outer step on its exchange, as the config's aggregator
    takes it (`following_round`); Unrebuilt when its exchange is not the group's ranks' or does
    not aggregate."""
    if before.rounds is None:
        raise Unrebuilt("its bundle records no exchange")
    problem = _members_problem(config, before.rounds)
    if problem is not None:
        raise Unrebuilt(problem)
    with _rebuilding():
        return following_round(
            spec, config, before.unit, end.state, before.payload, before.rounds[0]
        )


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
    config: GroupConfig, index: int, own: MemberView, peers: Mapping[int, tuple[str, bytes]]
) -> dict[int, MemberView]:
    """The views of the peers whose bundles hold their committed unit `index`, made up of the
    group's ranks, with as many steps and bytes as this rank's; any other peer fails its own
    verification, not this one."""
    views = {}
    for peer, (commitment, data) in peers.items():
        bundle = _committed_bundle(data, peer, index, commitment)
        if bundle is None or bundle.rounds is None or _members_problem(config, bundle.rounds):
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

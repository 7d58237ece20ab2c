"""Judging a unit run in another execution class: re-run it, compare trajectories within a
calibrated bound, and narrow a disagreement to one k-step segment re-run from the provider's own
committed state.

The distances are scale-free: how far apart two results are over how far training moved them.
`weights` compares full model weights, `sketch` the trace's weight sketches at each segment end,
`loss` the segments' mean losses (relative). Honest cross-class runs differ by rounding, which
grows with the steps run since the common start; the bounds are the largest honest distances
measured (scripts/calibrate_verification.py, shipped as tolerance.json) times MARGIN. Why a
cheater gains nothing inside them: docs/verification.md.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch

from marketplace.protocol import trace
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.spec import JobSpec
from node.engine import Shard, run_unit
from node.engine.environment import DEFAULT_HOST, Host
from node.engine.train import build_optimizer, form_problem, tensor_forms

TOLERANCE_FILE = Path(__file__).with_name("tolerance.json")
# Policy over the measurements: the bound is MARGIN times the largest honest distance measured,
# and never below FLOOR (a few float32 roundings of a loss or of one step's update).
MARGIN = 5.0
FLOOR = 1e-5
TOLERANCE_FORMAT = "zoo-compute/verification-tolerance-v1"
MEASURES = ("weights", "sketch", "loss")
_TINY = 1e-30

# The provider's committed intermediate state that a segment record names, or None if it cannot
# be had; it must hold the record's state hash (checked here).
StateSource = Callable[[Mapping[str, Any]], Checkpoint | None]


@dataclass(frozen=True)
class Tolerance:
    """Bounds on honest cross-class distances, per measure.

    `measured[m][n - 1]` is the largest honest distance of measure m seen n steps after a shared
    start. Honest drift comes mostly from rare events (a last-bit difference flipping the sign
    of an AdamW update whose gradient is near zero), which a finite calibration under-samples at
    any one step count; so the bound pools the table: `margin` times its largest entry, whatever
    the steps, and never below `floor`. Past the table's end it is not grown: a re-run that
    drifts further has its segments up to the first out of bounds re-run alone from the
    provider's states, and a segment is never longer than the table
    (trace.MAX_SEGMENT_STEPS), so the decisive comparison is always one the table measured.
    """

    measured: Mapping[str, tuple[float, ...]]
    margin: float
    floor: float

    def bound(self, measure: str) -> float:
        return max(self.floor, self.margin * max(self.measured[measure]))

    @classmethod
    def load(cls, path: Path = TOLERANCE_FILE, measures: tuple[str, ...] = MEASURES) -> Tolerance:
        data = json.loads(path.read_text())
        if data.get("format") != TOLERANCE_FORMAT:
            raise ValueError(f"{path} is not a {TOLERANCE_FORMAT} file")
        measured = {m: tuple(float(x) for x in data["measured"][m]) for m in measures}
        if not all(measured.values()):
            raise ValueError(f"{path} measures nothing for some distance")
        return cls(measured, MARGIN, FLOOR)


@dataclass
class Judgement:
    """`passed` None: the unit could not be judged (an input was unavailable)."""

    passed: bool | None
    reason: str
    segment: int | None = None  # index of the segment a failure was narrowed to
    steps_run: int = 0  # optimizer steps the verifier ran, its cost in units of training
    # the largest distance over its bound among the comparisons that decided the verdict: a
    # passing whole re-run and the segments re-run alone, or the failing segment (0 if the
    # verdict needed no distance)
    decisive: float = 0.0
    # the largest distance over its bound per measure in any comparison, flags included
    worst: dict[str, float] = field(default_factory=dict)


def ratio(a: Any, b: Any, origin: Any) -> float:
    """||a - b|| / ||b - origin|| over float tensors (dicts of them) or float lists."""
    return _norm(_sub(a, b)) / max(_norm(_sub(b, origin)), _TINY)


def _sub(a: Any, b: Any) -> list[torch.Tensor]:
    if isinstance(a, Mapping):
        keys = [k for k in sorted(a) if a[k].is_floating_point()]
        return [(a[k].double() - b[k].double()).reshape(-1) for k in keys]
    return [torch.tensor(a, dtype=torch.float64) - torch.tensor(b, dtype=torch.float64)]


def _norm(parts: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float(p.square().sum()) for p in parts))


def structure_problem(committed: Checkpoint, rerun: Checkpoint) -> str | None:
    """What makes `committed` not a result of the unit whatever the class: other tensors (a
    cheaper model), other progress, another schedule or generator state. None if nothing."""
    ours, theirs = rerun.state, committed.state
    for part in ("model", "optimizer"):
        mine, yours = tensor_forms(ours[part]), tensor_forms(theirs.get(part, {}))
        if mine != yours:
            return f"the committed {part} has other tensors than the unit makes"
    keys = ("step", "stream", "cursor", "spec_sha256")
    if any(ours["progress"].get(k) != theirs.get("progress", {}).get(k) for k in keys):
        return "the committed progress (step, shard, batch cursor, spec) is not the unit's"
    if ours["scheduler"] != theirs.get("scheduler"):
        return "the committed learning-rate schedule is not the unit's"
    # training draws nothing from the generator (hashed dropout), so its state is the same bits
    # in every class; another one would fail the unit's successor
    rng = theirs.get("rng")
    generator = rng.get("torch") if isinstance(rng, Mapping) else None
    mine_rng = ours["rng"]["torch"]
    if (
        not isinstance(generator, torch.Tensor)
        or tensor_forms(generator) != tensor_forms(mine_rng)
        or not torch.equal(mine_rng, generator)
    ):
        return "the committed generator state is not the unit's"
    return None


def trace_problem(committed: Checkpoint, boundaries: list[int]) -> str | None:
    """Whether the metadata's segment records are well-formed, at the unit's `boundaries`, and
    the ones the committed state's trace binds; None if they are."""
    recorded = committed.metadata.get("trace")
    segments = recorded.get("segments") if isinstance(recorded, Mapping) else None
    problem = records_problem(segments, boundaries)
    if problem is not None:
        return problem
    assert segments is not None  # well-formed records
    if [trace.leaf(s) for s in segments] != committed.state.get("trace"):
        return "the segment records are not the ones the committed state hash binds"
    return None


def history_problem(
    committed: Checkpoint, begin: int, segments: Sequence[Mapping[str, Any]]
) -> str | None:
    """Why the committed loss history (the recent steps' losses, which the next unit's spike
    detection weighs) is not the one the unit's well-formed records, from step `begin`, bind:
    its last entries are the last steps' losses, and each segment it holds whole averages to
    its record's loss, as the trainer computes both. None if it is."""
    history = committed.state["progress"]["loss_history"]
    ends = [begin, *(int(s["step"]) for s in segments)]
    for segment, first, last in zip(segments, ends, ends[1:], strict=False):
        if ends[-1] - first > len(history):
            continue  # the history does not reach back to it
        held = history[len(history) - (ends[-1] - first) : len(history) - (ends[-1] - last)]
        if sum(held) / len(held) != segment["loss"]:
            return "the committed loss history is not the steps' losses the records average"
    return None


def records_problem(segments: Any, boundaries: list[int]) -> str | None:
    """Why `segments` (from the network) are not well-formed segment records at `boundaries`;
    None if they are."""
    try:
        steps_at = [s["step"] for s in segments]
        for s in segments:
            trace.leaf(s)  # its fields hash: it has them all, each JSON
    except (KeyError, TypeError, ValueError):
        return "the committed checkpoint lists no well-formed segment records"
    if any(type(step) is not int for step in steps_at):
        return "a segment record's step is not a whole number"
    if steps_at != boundaries:
        return "the segment records are not at the unit's segment boundaries"
    for s in segments:
        if not _finite(s["loss"]):
            return "a segment record's loss is not a finite number"
        sketch = s["sketch"]
        if not isinstance(sketch, list) or len(sketch) != trace.SKETCH_DIM:
            return "a segment record's sketch is malformed"
        if not all(_finite(x) for x in sketch):
            return "a segment record's sketch holds other than finite numbers"
    return None


def _finite(x: Any) -> bool:
    """A finite float, as a trainer records them (an int of any size or a string is not one)."""
    return type(x) is float and math.isfinite(x)


class Ran(NamedTuple):
    """A verifier's re-run: where it ends, the segments it committed to, its steps' losses."""

    checkpoint: Checkpoint
    segments: list[dict[str, Any]]
    losses: list[float]


class Rerun(Protocol):
    """How the unit being judged is re-run: from a state (None: the spec's seed) for so many
    steps, `skip` batches past where the state's batch cursor stands."""

    def __call__(self, origin: Checkpoint | None, steps: int, skip: int = 0) -> Ran: ...


def unit_rerun(
    spec: JobSpec, shard: Shard, *, device: str = "cpu", host: Host = DEFAULT_HOST, **run: Any
) -> Rerun:
    """A single node's unit of `shard`, re-run by run_unit in this verifier's class; `run` goes
    to run_unit (storage, local data, limits)."""

    def rerun(origin: Checkpoint | None, steps: int, skip: int = 0) -> Ran:
        mine: list[dict[str, Any]] = []
        result = run_unit(
            spec,
            origin,
            shard,
            steps,
            device=device,
            devices=1,  # the bits do not depend on how many devices trained the unit
            host=host,
            on_segment=functools.partial(_keep, mine),
            skip=skip,
            **run,
        )
        return Ran(result.checkpoint, mine, result.metrics["losses"])

    return rerun


def judge(
    spec: JobSpec,
    start: Checkpoint | None,
    committed: Checkpoint,
    shard: Shard,
    steps: int,
    states: StateSource,
    tolerance: Tolerance,
    *,
    device: str = "cpu",
    host: Host = DEFAULT_HOST,
    **run: Any,
) -> Judgement:
    """Judge `committed` (already checked against its commitment) as `steps` steps of `shard`
    from `start`, in this verifier's class, within `tolerance` (`judge_trajectory`). `run`
    goes to run_unit (storage, local data, limits)."""
    begin = start.step if start is not None else 0
    rerun = unit_rerun(spec, shard, device=device, host=host, **run)
    return judge_trajectory(
        spec, start, committed, trace.boundaries(spec, begin, steps), states, tolerance, rerun
    )


def judge_trajectory(
    spec: JobSpec,
    start: Checkpoint | None,
    committed: Checkpoint,
    boundaries: list[int],
    states: StateSource,
    tolerance: Tolerance,
    rerun: Rerun,
) -> Judgement:
    """Judge `committed`, whose segment records end at `boundaries`, as `rerun` trains from
    `start`, within `tolerance`.

    A first pass re-runs the unit whole and compares every segment end; at the first one out of
    bounds it re-runs that segment, and each before it since the comparison's start, alone from
    the provider's committed state before it (what a dispute verifier does) and fails the unit
    if one lands out of bounds too; all inside, the drift was honest rounding that piled up, and
    the comparison starts again from the provider's state after the segment. The last segment
    is always re-run alone as well.
    """
    check = form_check(spec)
    problem = trace_problem(committed, boundaries) or check(committed)
    if problem is None:
        begin = start.step if start is not None else 0
        problem = history_problem(committed, begin, committed.metadata["trace"]["segments"])
    if problem:
        return Judgement(False, problem)
    states = _of_form(check, states)
    end = boundaries[-1]
    segments = committed.metadata["trace"]["segments"]
    worst: dict[str, float] = {}
    decisive, cost = 0.0, 0
    origin, first = start, 0  # the state the current comparison re-runs from, and its segment
    while True:
        at = origin.step if origin is not None else 0
        result = rerun(origin, end - at)
        mine = result.segments
        cost += end - at
        problem = structure_problem(committed, result.checkpoint)
        if problem:
            return Judgement(False, problem, steps_run=cost, worst=worst)
        base = trace.sketch(_model(origin, spec))
        apart, largest = None, 0.0
        for i, (theirs, ours) in enumerate(zip(segments[first:], mine, strict=True), first):
            distances = {
                "sketch": ratio(theirs["sketch"], ours["sketch"], base),
                "loss": _loss_ratio(theirs["loss"], ours["loss"]),
            }
            if i == len(segments) - 1:
                distances["weights"] = ratio(
                    committed.state["model"], result.checkpoint.state["model"], _model(origin, spec)
                )
            share = _share(distances, tolerance, worst)
            if not share <= 1.0:  # NaN is out of bounds
                apart = i
                break
            largest = max(largest, share)
        if apart is None:
            decisive = max(decisive, largest)
            if first == len(segments) - 1:  # the last segment was just re-run alone
                return Judgement(
                    True, "the re-run stays within bounds", None, cost, decisive, worst
                )
        # Each segment up to the one out of bounds is re-run alone: drift that crossed the bound
        # there may have begun in one before it, which the whole re-run weighed against more of
        # the unit's movement. Within bounds all the way, the last segment is re-run alone: a
        # step left out at its end is small against the whole unit's movement.
        for index in range(first, apart + 1) if apart is not None else [len(segments) - 1]:
            before = _state_at(segments, index - 1, first, origin, states)
            after = (
                committed
                if index == len(segments) - 1
                else _state_at(segments, index, 0, None, states)
            )
            if not isinstance(after, Checkpoint) or before is _MISSING:
                return Judgement(
                    False,
                    f"segment {index} is to be re-run alone and the provider's state around it "
                    "is not available or not what it committed",
                    index,
                    cost,
                    worst=worst,
                )
            before_state = before if isinstance(before, Checkpoint) else None
            share, problem, run = _segment_alone(
                spec, rerun, segments[index], before_state, after, tolerance, worst
            )
            cost += run
            if problem or not share <= 1.0:
                begins = before_state.step if before_state is not None else 0
                return Judgement(
                    False,
                    f"segment {index} (steps {begins}..{segments[index]['step']}) "
                    "re-run alone from the provider's own state "
                    f"lands {share:.3g} times the bound away ({problem or 'weights and loss'})",
                    index,
                    cost,
                    share,
                    worst,
                )
            decisive = max(decisive, share)
        if apart is None or apart == len(segments) - 1:
            return Judgement(
                True, "the segments re-run alone are within bounds", None, cost, decisive, worst
            )
        assert isinstance(after, Checkpoint)  # each one was, or the unit failed above
        origin, first = after, apart + 1


def _segment_alone(
    spec: JobSpec,
    rerun: Rerun,
    segment: Mapping[str, Any],
    before: Checkpoint | None,
    after: Checkpoint,
    tolerance: Tolerance,
    worst: dict[str, float],
) -> tuple[float, str | None, int]:
    """`segment` re-run alone from the provider's state `before` it (None: the spec's seed),
    against the provider's state `after` it: the distance's share of the bound, what makes
    `after` no result of the segment whatever the class (None if nothing), and the steps run.

    A rollback later in the unit to before the segment retrains it past the batches it
    skipped, which `before` does not record: the provider's state ahead by those batches, the
    segment is re-run again from there (a cheater skipping its own way still fails, as the
    whole re-run found the unit's end at the batch the verifier's rollbacks reach)."""
    length = int(segment["step"]) - (before.step if before else 0)
    alone, run = rerun(before, length), length
    skipped = _skipped_ahead(spec, after, alone.checkpoint)
    if skipped:
        alone, run = rerun(before, length, skip=skipped), 2 * length
    distances = {
        "weights": ratio(
            after.state["model"], alone.checkpoint.state["model"], _model(before, spec)
        ),
        "loss": _loss_ratio(segment["loss"], sum(alone.losses) / len(alone.losses)),
    }
    return _share(distances, tolerance, worst), structure_problem(after, alone.checkpoint), run


def _skipped_ahead(spec: JobSpec, theirs: Checkpoint, ours: Checkpoint) -> int:
    """The batches the provider's state is past ours at the same step of the same shard, up to
    what the unit's rollbacks can skip (0 for more, or none)."""
    at_theirs, at_ours = theirs.state["progress"], ours.state["progress"]
    spike = spec.training.loss_spike
    most = spike.max_rollbacks * (spec.checkpoint.every + 1 + spike.skip_batches)
    ahead = int(at_theirs["cursor"]) - int(at_ours["cursor"])
    same = (at_theirs["step"], at_theirs["stream"]) == (at_ours["step"], at_ours["stream"])
    return ahead if spike.enabled and same and 0 < ahead <= most else 0


_MISSING = object()


def form_check(spec: JobSpec) -> Callable[[Checkpoint], str | None]:
    """Why a checkpoint's state is not of the form the spec's trainer saves (None if it is):
    what the network hands a verifier to re-run from is checked before anything reads it."""
    with torch.device("meta"):  # the forms alone: no memory, no draw from the generator
        model = spec.build_model()
    optimizer = build_optimizer(model, spec.training)

    def problem(checkpoint: Checkpoint) -> str | None:
        found = form_problem(checkpoint.state, spec, model, optimizer)
        if found is None and checkpoint.state["progress"]["spec_sha256"] != spec.sha256():
            return "it was produced under another job spec"
        return found

    return problem


def _of_form(problem: Callable[[Checkpoint], str | None], states: StateSource) -> StateSource:
    """`states`, with a state of which `problem` (a `form_check`) finds one taken for none (so
    the unit fails as one whose states cannot be had), rather than raising in a comparison or
    a re-run."""

    def of_form(segment: Mapping[str, Any]) -> Checkpoint | None:
        state = states(segment)
        return None if state is None or problem(state) is not None else state

    return of_form


def _keep(into: list[dict[str, Any]], segment: dict[str, Any], _state: Checkpoint) -> None:
    """Keep `segment`, in place of the ones at or past its step: after a loss-spike rollback
    the trainer commits to those segments again, and only the last commitment counts."""
    into[:] = [kept for kept in into if kept["step"] < segment["step"]] + [segment]


def _state_at(
    segments: list[dict[str, Any]],
    index: int,
    first: int,
    origin: Checkpoint | None,
    states: StateSource,
) -> Checkpoint | None | object:
    """The provider's state at the end of segment `index` (the comparison's origin before its
    first segment), or _MISSING if it cannot be had or is not what the record names."""
    if index < first:
        return origin
    state = states(segments[index])
    if state is None or state.state_hash() != segments[index]["state_hash"]:
        return _MISSING
    return state


def _model(state: Checkpoint | None, spec: JobSpec) -> dict[str, torch.Tensor]:
    """The weights a unit starts from: the checkpoint's, or the spec's seeded initialisation."""
    if state is not None:
        return state.state["model"]
    torch.manual_seed(spec.reproducibility.seed)
    return spec.build_model().state_dict()


# A segment as its trainer committed to it: the record and the state it names.
Segment = tuple[Mapping[str, Any], Checkpoint]


def segment_drift(
    theirs: Sequence[Segment], ours: Sequence[Segment], origin: Mapping[str, Any], at: int
) -> list[tuple[int, dict[str, float]]]:
    """(steps since the common start at step `at`, distances) at each pair of segment ends of
    two trajectories from the same `origin` weights, by the distances the judge compares: what
    the calibrations measure between a provider's segments and a verifier's re-run."""
    base = trace.sketch(origin)
    return [
        (
            int(sa["step"]) - at,
            {
                "weights": ratio(ca.state["model"], cb.state["model"], origin),
                "sketch": ratio(sa["sketch"], sb["sketch"], base),
                "loss": _loss_ratio(sa["loss"], sb["loss"]),
            },
        )
        for (sa, ca), (sb, cb) in zip(theirs, ours, strict=True)
    ]


def _loss_ratio(theirs: float, ours: float) -> float:
    return abs(theirs - ours) / max(abs(ours), _TINY)


def _share(distances: Mapping[str, float], tolerance: Tolerance, worst: dict[str, float]) -> float:
    """The largest of the distances over its bound (NaN if any is NaN); `worst` keeps each
    measure's largest."""
    shares = {m: d / tolerance.bound(m) for m, d in distances.items()}
    for measure, share in shares.items():
        worst[measure] = max(worst.get(measure, 0.0), share)
    if any(math.isnan(x) for x in shares.values()):
        return math.nan
    return max(shares.values())

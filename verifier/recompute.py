"""Re-run one committed work unit from its inputs by CID and judge it against its commitment."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import torch

from marketplace.protocol.checkpoint import Checkpoint, CheckpointError
from marketplace.protocol.execution import ExecutionClass, ExecutionClassError, is_class_id
from marketplace.protocol.round_signatures import RoundSigners, Tenure
from marketplace.protocol.spec import MAX_SPEC_BYTES
from marketplace.protocol.units import CHECKPOINTS, RANK_BUNDLES, unit_format
from marketplace.storage import (
    CidMismatch,
    ContentNotFound,
    ContentTooLarge,
    InvalidCid,
    NodeUnavailable,
    Storage,
    is_cid,
)
from node.distributed.job import group_config, rank_bundle_bytes
from node.distributed.rank_unit import rank_class
from node.engine import (
    DataError,
    JobSpec,
    SpecError,
    TrainingDiverged,
    parse_spec,
    run_unit,
    unit_shard,
)
from node.engine.environment import DEFAULT_HOST, Host, execution_class
from node.engine.limits import checkpoint_bytes
from verifier import trajectory
from verifier.errors import InputsUnavailable, Withheld
from verifier.rank_recompute import RankTolerance, judge_rank, rank_tolerance

log = logging.getLogger(__name__)
T = TypeVar("T")

EVIDENCE_FORMAT = "zoo-compute/verification-evidence-v2"  # v2: slot_tenures hold [first, last]
# Failures to fetch that another attempt (or another node) may cure; never grounds for a verdict.
TRANSIENT = (ContentNotFound, NodeUnavailable, CidMismatch)


@dataclass(frozen=True)
class Runner:
    """How this verifier re-runs units: on which device, with which host settings, and which
    other execution classes (by id) it declares it reproduces bit for bit. A unit of a class it
    reproduces is judged by its exact state hash; any other within the calibrated tolerance."""

    device: str = "cpu"
    host: Host = DEFAULT_HOST
    classes: frozenset[str] = frozenset()
    tolerance: trajectory.Tolerance = field(default_factory=trajectory.Tolerance.load)
    # ddp ranks of another class: how far they may be (verifier/rank_tolerance.json)
    rank_tolerance: RankTolerance = field(default_factory=rank_tolerance)

    def own_class(self, spec: JobSpec) -> ExecutionClass:
        return execution_class(spec, torch.device(self.device), self.host)

    def reproduces(self, spec: JobSpec, class_id: str | None) -> bool:
        return class_id is not None and (
            class_id in self.classes or class_id == self.own_class(spec).class_id()
        )

    def reproduces_rank(self, spec: JobSpec, class_id: str | None) -> bool:
        """Ranks are re-run as ranks train, on one CPU thread, whatever this runner's device."""
        return class_id is not None and (
            class_id in self.classes or class_id == rank_class(spec).class_id()
        )


DEVICE_ENV = "ZOO_VERIFIER_DEVICE"  # the device a worker re-runs on: cpu (default) or cuda
CLASSES_ENV = "ZOO_VERIFIER_CLASSES"  # comma-separated class ids it declares it reproduces


def runner_from_env(environ: Mapping[str, str] = os.environ) -> Runner:
    """The Runner `verifier worker --device --reproduces` configures (through the environment,
    which its Celery processes inherit); ValueError naming a malformed value."""
    device = environ.get(DEVICE_ENV, "cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"{DEVICE_ENV} must be cpu or cuda; got {device!r}")
    classes = frozenset(c.strip() for c in environ.get(CLASSES_ENV, "").split(",") if c.strip())
    bad = sorted(c for c in classes if not is_class_id(c))
    if bad:
        raise ValueError(f"{CLASSES_ENV} holds what is not a class id: {bad}")
    return Runner(device=device, classes=classes)


def recorded_class(checkpoint: Checkpoint) -> str | None:
    """The id of the execution class a checkpoint records, None if it records none well-formed
    (then no verifier reproduces it, and it is judged within the tolerance)."""
    record = checkpoint.metadata.get("execution")
    if not isinstance(record, Mapping):
        return None
    try:
        return ExecutionClass.from_dict(record.get("class")).class_id()
    except ExecutionClassError:
        return None


@dataclass(frozen=True)
class PeerUnit:
    """Another slot's commitment of the same unit of a group job: its bundle's CID and hash,
    and the provider that committed it, whose key signed what the slot sent in the unit."""

    slot: int
    cid: str
    state_hash: str  # hex, as committed
    provider: str


@dataclass(frozen=True)
class UnitInputs:
    """Everything a worker needs to re-run a unit, all of it read from the chain by the daemon.

    `previous_*` name the checkpoint committed as unit `index - 1` of the slot before this unit
    (None for unit 0, which starts from the spec's seed). A checkpoint the unit's provider
    committed (its own, or its previous one) that still cannot be fetched at `withheld_after`
    (unix time; None: never judged so) is withheld, which fails the unit: serving it is part of
    the commitment.
    """

    job_id: int
    slot: int
    index: int
    provider: str
    spec_cid: str
    cid: str  # the checkpoint this unit committed
    state_hash: str  # hex, as committed
    previous_cid: str | None = None
    previous_state_hash: str | None = None
    previous_provider: str | None = None
    withheld_after: float | None = None
    # group jobs: the other slots' commitments of this unit, whose records vote on this one's
    peers: tuple[PeerUnit, ...] = ()
    # group jobs: by slot, each provider it was assigned to or committed by so far -> the
    # units whose exchanges it could have signed for the slot
    slot_tenures: tuple[dict[str, Tenure], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UnitInputs:
        peers = tuple(PeerUnit(**peer) for peer in data.get("peers", ()))
        tenures = tuple(
            {holder: Tenure(*held) for holder, held in slot.items()}
            for slot in data.get("slot_tenures", ())
        )
        return cls(**data | {"peers": peers, "slot_tenures": tenures})


@dataclass(frozen=True)
class Verdict:
    """`passed` is None when the unit could not be judged: nothing should be posted then."""

    passed: bool | None
    reason: str
    recomputed_state_hash: str | None = None
    metrics: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None
    # how it was judged: "exact" (same class) or "tolerant", the segment a failure was
    # narrowed to, the largest distance over its bound per measure, the steps re-run
    judgement: dict[str, Any] | None = None

    def evidence(self, inputs: UnitInputs) -> dict[str, Any]:
        """The document pinned to IPFS and named on-chain: enough for anyone to redo the check."""
        return {
            "format": EVIDENCE_FORMAT,
            "job": inputs.job_id,
            "slot": inputs.slot,
            "index": inputs.index,
            "provider": inputs.provider,
            "spec_cid": inputs.spec_cid,
            "checkpoint_cid": inputs.cid,
            "previous_cid": inputs.previous_cid,
            "committed_state_hash": inputs.state_hash,
            "peers": [asdict(peer) for peer in inputs.peers],
            "slot_tenures": list(inputs.slot_tenures),
            "recomputed_state_hash": self.recomputed_state_hash,
            "pass": self.passed,
            "reason": self.reason,
            "metrics": self.metrics,
            "environment": self.environment,
            "judgement": self.judgement,
        }


def _fetch(
    storage: Storage,
    cid: str,
    what: str,
    max_bytes: int,
    unavailable: type[InputsUnavailable] = InputsUnavailable,
) -> bytes:
    """The content within `max_bytes` (ContentTooLarge past it: the reader judges what that
    means); `unavailable` when it cannot be fetched now (Withheld for a checkpoint the unit's
    own provider committed), or ever: a `cid` that is not one names nothing to fetch."""
    try:
        return storage.cat(cid, max_bytes=max_bytes)
    except (*TRANSIENT, InvalidCid) as exc:
        raise unavailable(f"{what} {cid}: {exc}") from exc


def _judge_checkpoint_unit(
    spec: JobSpec, inputs: UnitInputs, storage: Storage, runner: Runner
) -> Verdict:
    """A single-node job's unit: its checkpoint re-made from the slot's previous one, exactly
    if this verifier reproduces the unit's execution class, else within the tolerance. The
    unit's own checkpoint is checked first, so that a withheld or false one costs no re-run."""
    try:
        shard, steps = unit_shard(spec, inputs.slot), CHECKPOINTS.steps(spec, inputs.index)
    except (DataError, ValueError) as exc:
        return Verdict(None, f"the job spec cannot be run: {exc}")

    bound = checkpoint_bytes(spec)
    try:
        committed = Checkpoint.load(
            _fetch(storage, inputs.cid, "committed checkpoint", bound, Withheld)
        )
        if committed.state_hash() != inputs.state_hash:
            return Verdict(False, "committed checkpoint does not hold the committed state")
        previous = _previous_checkpoint(spec, inputs, storage, bound)
    except (ContentTooLarge, CheckpointError) as exc:
        return Verdict(False, f"committed checkpoint unreadable: {exc}")
    if isinstance(previous, Verdict):
        return previous

    if not runner.reproduces(spec, recorded_class(committed)):
        return _judge_tolerantly(spec, inputs, storage, runner, previous, committed)
    result = _rerun(
        lambda: run_unit(
            spec,
            previous,
            shard,
            steps,
            storage=storage,
            device=runner.device,
            devices=1,  # the bits do not depend on how many devices trained the unit
            host=runner.host,
        )
    )
    if isinstance(result, Verdict):
        return result
    judged = {
        "recomputed_state_hash": result.state_hash,
        "metrics": result.metrics,
        "environment": result.checkpoint.metadata["environment"],
        "judgement": {"mode": "exact", "steps_run": steps},
    }
    if result.state_hash != inputs.state_hash:
        return Verdict(False, "recomputed state hash differs from the committed one", **judged)
    return Verdict(True, "recomputed state hash matches the commitment", **judged)


def _rerun(run: Callable[[], T]) -> T | Verdict:
    """What `run` (a re-run of the unit) returns, or the verdict its failure means: a unit that
    diverges fails, one that cannot run is left unjudged, and missing data is fetched again."""
    try:
        return run()
    except TrainingDiverged as exc:
        return Verdict(False, f"the unit diverges when re-run: {exc}")
    except TRANSIENT as exc:
        raise InputsUnavailable(f"job data: {exc}") from exc
    except (DataError, CheckpointError) as exc:
        return Verdict(None, f"the unit cannot be re-run: {exc}")


def _previous_checkpoint(
    spec: JobSpec, inputs: UnitInputs, storage: Storage, bound: int
) -> Checkpoint | Verdict | None:
    """Where the unit starts: None for unit 0, else the previous unit's checkpoint, or the verdict
    when it is bad. Bad input from another provider leaves this unit unjudged; from this unit's
    own provider, it fails the unit, since that provider committed both."""
    if inputs.index == 0:
        return None
    if inputs.previous_cid is None:
        return Verdict(None, "no committed checkpoint for the previous unit")
    own = inputs.previous_provider is not None and inputs.previous_provider == inputs.provider
    verdict = False if own else None
    unavailable = Withheld if own else InputsUnavailable
    try:
        data = _fetch(storage, inputs.previous_cid, "previous checkpoint", bound, unavailable)
        previous = Checkpoint.load(data)
    except (ContentTooLarge, CheckpointError) as exc:
        return Verdict(verdict, f"previous checkpoint unreadable: {exc}")
    if previous.state_hash() != inputs.previous_state_hash:
        return Verdict(verdict, "previous checkpoint does not hold its committed state")
    problem = trajectory.form_check(spec)(previous)
    if problem is not None:
        return Verdict(verdict, f"previous checkpoint is no training state of the job: {problem}")
    return previous


def _judge_tolerantly(
    spec: JobSpec,
    inputs: UnitInputs,
    storage: Storage,
    runner: Runner,
    previous: Checkpoint | None,
    committed: Checkpoint,
) -> Verdict:
    """A unit of a class this verifier does not reproduce: trajectory.judge, with the provider's
    intermediate states fetched by the CIDs its segment records carry."""
    judged = _rerun(
        lambda: trajectory.judge(
            spec,
            previous,
            committed,
            unit_shard(spec, inputs.slot),
            CHECKPOINTS.steps(spec, inputs.index),
            _provider_states(spec, storage),
            runner.tolerance,
            device=runner.device,
            host=runner.host,
            storage=storage,
        )
    )
    if isinstance(judged, Verdict):
        return judged
    return Verdict(
        judged.passed,
        judged.reason,
        environment={"class": runner.own_class(spec).to_dict()},
        judgement={
            "mode": "tolerant",
            "segment": judged.segment,
            "steps_run": judged.steps_run,
            "worst_share_of_bound": judged.worst,
        },
    )


def _provider_states(
    spec: JobSpec, storage: Storage, unavailable: type[InputsUnavailable] = Withheld
) -> trajectory.StateSource:
    """The provider's intermediate states, fetched by the CIDs its segment records carry; one
    that cannot be fetched raises `unavailable`: Withheld where the unit's own provider committed
    them, so that a state nobody serves fails the unit once its patience is over, rather than
    leaving it unjudged."""
    bound = checkpoint_bytes(spec)

    def provider_state(segment: Mapping[str, Any]) -> Checkpoint | None:
        cid = segment.get("cid")
        if not isinstance(cid, str):
            return None
        if not is_cid(cid):  # a record naming no content: its state cannot be had
            return None
        try:
            return Checkpoint.load(_fetch(storage, cid, "segment state", bound, unavailable))
        except (CheckpointError, ContentTooLarge):
            return None

    return provider_state


def _judge_rank_unit(
    spec: JobSpec, inputs: UnitInputs, storage: Storage, runner: Runner
) -> Verdict:
    """A group job's unit with the bundles around it: the other slots' of the same unit, and
    the slot's previous one, where this unit must start."""
    bound = rank_bundle_bytes(spec)
    try:
        bundle = _fetch(storage, inputs.cid, "rank bundle", bound, Withheld)
    except ContentTooLarge as exc:
        return Verdict(False, f"the rank bundle is larger than its model allows: {exc}")
    peers, previous = _peer_bundles(inputs.peers, storage, bound), None
    own = inputs.previous_provider is None or inputs.previous_provider == inputs.provider
    if inputs.previous_cid is not None and inputs.previous_state_hash is not None:
        try:
            data = _fetch(storage, inputs.previous_cid, "previous rank bundle", bound)
        except ContentTooLarge as exc:
            return Verdict(None, f"previous rank bundle unreadable: {exc}")
        previous = (inputs.previous_state_hash, data)
    config = group_config(spec)
    tenures = {slot: config.tenures(spec, units) for slot, units in enumerate(inputs.slot_tenures)}
    judgement = judge_rank(
        spec,
        inputs.slot,
        inputs.index,
        inputs.state_hash,
        bundle,
        peers,
        previous,
        signers=RoundSigners(
            inputs.job_id,
            {peer.slot: peer.provider for peer in inputs.peers} | {inputs.slot: inputs.provider},
            tenures,
        ),
        reproduces=lambda class_id: runner.reproduces_rank(spec, class_id),
        tolerance=runner.rank_tolerance,
        # a round's states, pinned on the replicas with its bundle: one that no node serves
        # fails the round once the verifier's patience is over, as its bundle would; its
        # previous round's, where another provider committed it, are not this one's to serve
        states=_provider_states(spec, storage),
        previous_states=_provider_states(spec, storage, Withheld if own else InputsUnavailable),
        own_previous=own,
    )
    passed, reason, recomputed, how = judgement
    environment = None if how is None else {"class": rank_class(spec).to_dict()}
    return Verdict(passed, reason, recomputed, environment=environment, judgement=how)


def _peer_bundles(
    peers: tuple[PeerUnit, ...], storage: Storage, max_bytes: int
) -> dict[int, tuple[str, bytes]]:
    """slot -> (commitment, bundle) of each peer whose bundle can be fetched now; one that
    cannot just has no say, rather than holding this unit's verdict back."""
    bundles = {}
    for peer in peers:
        try:
            bundles[peer.slot] = (peer.state_hash, storage.cat(peer.cid, max_bytes=max_bytes))
        except (*TRANSIENT, ContentTooLarge) as exc:
            log.warning("slot %d's bundle %s: %s; judging without it", peer.slot, peer.cid, exc)
    return bundles


_JUDGES = {CHECKPOINTS: _judge_checkpoint_unit, RANK_BUNDLES: _judge_rank_unit}  # by unit format


def recompute(inputs: UnitInputs, storage: Storage, runner: Runner | None = None) -> Verdict:
    """Re-run the unit with the job's deterministic settings as `runner` says (default: on the
    CPU with the spec's settings) and judge it the way the job's unit format is judged.

    Fails the unit only on grounds every honest verifier reaches from the same content-addressed
    inputs: a recomputed hash that differs in a class this verifier reproduces, a trajectory
    beyond the calibrated bound in one it does not, a committed unit that is unreadable or does
    not hold the committed state, or a re-run that diverges. Inputs it cannot fetch raise
    InputsUnavailable; inputs that are wrong through no fault of this unit (a bad spec, or a
    previous unit not matching its own commitment) give an inconclusive verdict.
    """
    try:
        spec = parse_spec(_fetch(storage, inputs.spec_cid, "job spec", MAX_SPEC_BYTES).decode())
    except (SpecError, DataError, ValueError) as exc:  # ContentTooLarge is a ValueError too
        return Verdict(None, f"the job spec cannot be run: {exc}")
    return _JUDGES[unit_format(spec)](spec, inputs, storage, runner or Runner())

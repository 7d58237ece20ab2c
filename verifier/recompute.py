"""Re-run one committed work unit from its inputs by CID and judge it against its commitment."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from marketplace.protocol.checkpoint import Checkpoint, CheckpointError
from marketplace.protocol.spec import MAX_SPEC_BYTES
from marketplace.protocol.units import CHECKPOINTS, RANK_BUNDLES, unit_format
from marketplace.storage import (
    CidMismatch,
    ContentNotFound,
    ContentTooLarge,
    NodeUnavailable,
    Storage,
)
from node.engine import (
    DataError,
    JobSpec,
    SpecError,
    TrainingDiverged,
    parse_spec,
    run_unit,
    unit_shard,
)
from node.engine.limits import checkpoint_bytes
from verifier.errors import InputsUnavailable, Withheld
from verifier.rank_recompute import judge_rank

log = logging.getLogger(__name__)

EVIDENCE_FORMAT = "zoo-compute/verification-evidence-v1"
# Failures to fetch that another attempt (or another node) may cure; never grounds for a verdict.
TRANSIENT = (ContentNotFound, NodeUnavailable, CidMismatch)


@dataclass(frozen=True)
class PeerUnit:
    """Another slot's commitment of the same unit of a group job: its bundle's CID and hash."""

    slot: int
    cid: str
    state_hash: str  # hex, as committed


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UnitInputs:
        peers = tuple(PeerUnit(**peer) for peer in data.get("peers", ()))
        return cls(**data | {"peers": peers})


@dataclass(frozen=True)
class Verdict:
    """`passed` is None when the unit could not be judged: nothing should be posted then."""

    passed: bool | None
    reason: str
    recomputed_state_hash: str | None = None
    metrics: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None

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
            "recomputed_state_hash": self.recomputed_state_hash,
            "pass": self.passed,
            "reason": self.reason,
            "metrics": self.metrics,
            "environment": self.environment,
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
    own provider committed)."""
    try:
        return storage.cat(cid, max_bytes=max_bytes)
    except TRANSIENT as exc:
        raise unavailable(f"{what} {cid}: {exc}") from exc


def _judge_checkpoint_unit(spec: JobSpec, inputs: UnitInputs, storage: Storage) -> Verdict:
    """A single-node job's unit: its checkpoint re-made from the slot's previous one. The unit's
    own checkpoint is checked first, so that a withheld or false one costs no re-run."""
    try:
        shard, steps = unit_shard(spec, inputs.slot), CHECKPOINTS.steps(spec, inputs.index)
    except (DataError, ValueError) as exc:
        return Verdict(None, f"the job spec cannot be run: {exc}")

    bound = checkpoint_bytes(spec)
    try:
        own = _fetch(storage, inputs.cid, "committed checkpoint", bound, Withheld)
        if Checkpoint.load(own).state_hash() != inputs.state_hash:
            return Verdict(False, "committed checkpoint does not hold the committed state")
        del own
        previous = _previous_checkpoint(inputs, storage, bound)
    except (ContentTooLarge, CheckpointError) as exc:
        return Verdict(False, f"committed checkpoint unreadable: {exc}")
    if isinstance(previous, Verdict):
        return previous

    try:
        result = run_unit(spec, previous, shard, steps, storage=storage, device="cpu")
    except TrainingDiverged as exc:
        return Verdict(False, f"the unit diverges when re-run: {exc}")
    except TRANSIENT as exc:
        raise InputsUnavailable(f"job data: {exc}") from exc
    except (DataError, CheckpointError) as exc:
        return Verdict(None, f"the unit cannot be re-run: {exc}")
    judged = {
        "recomputed_state_hash": result.state_hash,
        "metrics": result.metrics,
        "environment": result.checkpoint.metadata["environment"],
    }
    if result.state_hash != inputs.state_hash:
        return Verdict(False, "recomputed state hash differs from the committed one", **judged)
    return Verdict(True, "recomputed state hash matches the commitment", **judged)


def _previous_checkpoint(
    inputs: UnitInputs, storage: Storage, bound: int
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
    return previous


def _judge_rank_unit(spec: JobSpec, inputs: UnitInputs, storage: Storage) -> Verdict:
    """A group job's unit, in ddp with the bundles around it: the other slots' of the same
    unit, and the slot's previous one, where this unit must start."""
    bound = 2 * checkpoint_bytes(spec)  # a bundle holds the weights and the rank's update
    try:
        bundle = _fetch(storage, inputs.cid, "rank bundle", bound, Withheld)
    except ContentTooLarge as exc:
        return Verdict(False, f"the rank bundle is larger than its model allows: {exc}")
    peers, previous = {}, None
    if spec.distributed.strategy == "ddp":
        peers = _peer_bundles(inputs.peers, storage, bound)
        if inputs.previous_cid is not None and inputs.previous_state_hash is not None:
            try:
                data = _fetch(storage, inputs.previous_cid, "previous rank bundle", bound)
            except ContentTooLarge as exc:
                return Verdict(None, f"previous rank bundle unreadable: {exc}")
            previous = (inputs.previous_state_hash, data)
    judgement = judge_rank(
        spec, inputs.slot, inputs.index, inputs.state_hash, bundle, peers, previous
    )
    return Verdict(*judgement)


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


def recompute(inputs: UnitInputs, storage: Storage) -> Verdict:
    """Re-run the unit on the CPU with the job's deterministic settings and compare hashes, the
    way the job's unit format is judged.

    Fails the unit only on grounds every honest verifier reaches from the same content-addressed
    inputs: a recomputed hash that differs, a committed unit that is unreadable or does not
    hold the committed state, or a re-run that diverges. Inputs it cannot fetch raise
    InputsUnavailable; inputs that are wrong through no fault of this unit (a bad spec, or a
    previous unit not matching its own commitment) give an inconclusive verdict.
    """
    try:
        spec = parse_spec(_fetch(storage, inputs.spec_cid, "job spec", MAX_SPEC_BYTES).decode())
    except (SpecError, DataError, ValueError) as exc:  # ContentTooLarge is a ValueError too
        return Verdict(None, f"the job spec cannot be run: {exc}")
    return _JUDGES[unit_format(spec)](spec, inputs, storage)

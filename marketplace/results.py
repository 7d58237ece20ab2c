"""A job's trained model read back from its committed units: the loss a unit reports, and the
final weights, checked against what the chain committed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from marketplace.errors import ZooError
from marketplace.storage import Storage

if TYPE_CHECKING:
    from node.engine import Checkpoint


class ResultError(ZooError):
    """A job's committed units do not make a trained model."""


class LastUnit(NamedTuple):
    """A slot's live last unit, as the chain or a gateway reports it."""

    slot: int
    index: int
    cid: str
    state_hash: str  # hex, 0x optional


def unit_loss(data: bytes) -> float | None:
    """The training loss a committed unit reports: a checkpoint's metrics, or the last loss a
    group job's rank had seen when its round began; None for what is neither."""
    # Both are torch pickles: torch loads with the first unit read, not with every CLI command.
    from node.engine import Checkpoint, CheckpointError
    from node.work import load_rank_bundle

    try:
        return Checkpoint.load(data).metadata.get("metrics", {}).get("loss")
    except CheckpointError:
        pass
    try:
        history = load_rank_bundle(data).unit.trainer["progress"]["loss_history"]
    except ValueError:
        return None
    return float(history[-1]) if history else None


def write_result(storage: Storage, job_id: int, units: list[LastUnit], nodes: int, units_per_node: int,
                 output: Path) -> tuple[str, str]:
    """Write the trained model's weights to `output`; returns (CID, state hash) of what they came from.

    `units` are the slots' live last units. A single-node job's model is slot 0's, a checkpoint,
    checked against the state hash committed on-chain before anything is written. A group job's
    is the model every rank's last round bundle holds: each rank applies the same outer steps, so
    all of them must hold the same weights, and any disagreement is refused.
    """
    if not units:
        raise ResultError(f"job {job_id} has no committed checkpoint")
    from node.engine import Checkpoint, CheckpointError  # torch, loaded only to fetch a result

    unit = min(units)  # slot 0's
    data = storage.cat(unit.cid)
    try:
        checkpoint = Checkpoint.load(data)
    except CheckpointError:
        if len(units) < nodes or any(u.index != units_per_node - 1 for u in units):
            raise ResultError(f"job {job_id} has not delivered every rank's last round") from None
        weights, digest = group_weights(storage, job_id, units, data)
    else:
        digest = unit.state_hash.removeprefix("0x")
        weights = checked(checkpoint, unit.cid, digest).state["model"]
    write_weights(weights, output)
    return unit.cid, digest


def group_weights(storage: Storage, job_id: int, units: list[LastUnit], first: bytes) -> tuple[dict, str]:
    """The model all ranks' last bundles hold (`first`: slot 0's, already fetched), and its hash."""
    from node.engine import state_hash  # torch, loaded only to fetch a result
    from node.work import load_rank_bundle

    digests, weights = {}, None
    for unit in sorted(units):
        try:
            held = load_rank_bundle(first if weights is None else storage.cat(unit.cid)).weights
        except ValueError as exc:
            raise ResultError(f"unit {unit.cid} is neither a checkpoint nor a rank bundle: {exc}") from None
        if held is None:
            raise ResultError(f"rank bundle {unit.cid} holds no trained model")
        weights = weights or held
        digests[unit.slot] = state_hash(held)
    if len(set(digests.values())) != 1:
        raise ResultError(f"job {job_id}: the ranks' final weights disagree (by slot: {digests})")
    return weights, digests[min(digests)]


def checked(checkpoint: Checkpoint, cid: str, committed: str) -> Checkpoint:
    committed = committed.removeprefix("0x")
    if checkpoint.state_hash() != committed:
        raise ResultError(f"checkpoint {cid} does not hold the committed state {committed}")
    return checkpoint


def write_weights(weights: dict, output: Path) -> None:
    import torch  # loaded only to write a result

    output.parent.mkdir(parents=True, exist_ok=True)
    torch.save(weights, output)

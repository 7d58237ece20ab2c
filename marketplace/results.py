"""A job's trained model read back from its committed units: the loss a unit reports, and the
final weights, checked against what the chain committed, by the rules of the job's unit format
(marketplace/protocol/units.py)."""

from __future__ import annotations

from pathlib import Path

from marketplace.protocol.units import LastUnit, UnitFormatError, read_unit, trained_model
from marketplace.storage import Storage


def unit_loss(data: bytes) -> float | None:
    """The training loss a committed unit reports; None for bytes that are no unit. Units are
    tensor files: torch loads with the first unit read, not with every CLI command."""
    try:
        fmt, unit = read_unit(data)
    except UnitFormatError:
        return None
    return fmt.loss(unit)


def write_result(
    storage: Storage,
    job_id: int,
    units: list[LastUnit],
    nodes: int,
    units_per_node: int,
    output: Path,
) -> tuple[str, str]:
    """Write the trained model's weights to `output`; returns (CID, state hash) of what they came
    from.

    `units` are the slots' live last units; what makes the model of them is the format's rule
    (`trained_model`): slot 0's checkpoint checked against its committed state hash, or the
    model every rank's last bundle holds, all of them the same.
    """
    model = trained_model(job_id, units, nodes, units_per_node, storage.cat)
    write_weights(model.weights, output)
    return model.cid, model.state_hash


def write_weights(weights: dict, output: Path) -> None:
    import torch  # loaded only to write a result

    output.parent.mkdir(parents=True, exist_ok=True)
    torch.save(weights, output)

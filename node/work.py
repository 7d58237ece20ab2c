"""How a job's spec maps onto on-chain work units: what provider and verifier must agree on.

Single-node jobs (`distributed.strategy: single`): slot `s` trains on data shard `s` over the
whole step range; its unit `i` is the `checkpoint.every` optimizer steps from step
`i * every` (the last unit may be shorter). Unit 0 starts from the spec's seed; unit `i > 0`
from the checkpoint committed as unit `i - 1`.

Group jobs (`ddp`, `diloco`): slot `s` is rank `s` of the job's group, and its unit `i` is
its DiLoCo round `i`, or in ddp its `checkpoint.every` steps from step `i * every`. The
unit's CID names a rank bundle (`rank_bundle`): the rank's inputs for the unit (a
`RankUnit`: the global weights and outer momentum, its optimizer, data position and
error-feedback residual at the unit's start), the payloads it sent, back to back, and in
ddp every step's members and what each of them sent, from which each step's aggregate is
rebuilt. The unit's state hash is the payloads' sha256, the rank's commitment: a verifier
re-runs the unit from the bundle and names the rank whose payloads do not reproduce. A
rank's last bundle also holds the group's trained model: every rank ends with the same
weights, so the result is what all slots' last units agree on.
"""

from __future__ import annotations

import io
import pickle
import struct
from typing import NamedTuple

import torch

from marketplace.protocol.units import units_per_node
from node.distributed.rank_unit import RankUnit, RecordedRound
from node.engine import JobSpec, Shard

RANK_BUNDLE_FORMAT = "zoo-compute/rank-unit-v2"


def unit_shard(spec: JobSpec, slot: int) -> Shard:
    """The data shard every unit of `slot` reads."""
    return Shard.of(spec, index=slot, start_step=0, end_step=spec.training.max_steps)


def unit_steps(spec: JobSpec, index: int) -> int:
    """Optimizer steps in unit `index`."""
    start = index * spec.checkpoint.every
    if not 0 <= start < spec.training.max_steps:
        raise ValueError(f"unit {index} is outside the job's {units_per_node(spec)} units")
    return min(spec.checkpoint.every, spec.training.max_steps - start)


class RankBundle(NamedTuple):
    unit: RankUnit  # the rank's inputs for the unit
    payload: bytes  # what it sent, back to back
    weights: dict[str, torch.Tensor] | None  # the group's model after the job's last unit
    rounds: list[RecordedRound] | None  # ddp: every step's members and what they sent


def rank_bundle(
    unit: RankUnit,
    payload: bytes,
    weights: dict[str, torch.Tensor] | None = None,
    rounds: list[RecordedRound] | None = None,
) -> bytes:
    """What a group job's unit pins: the rank's inputs and the payloads it sent, in ddp the
    unit's rounds; the last unit's also holds the trained model, the job's result."""
    buffer = io.BytesIO()
    torch.save(
        {
            "format": RANK_BUNDLE_FORMAT,
            "rank": unit.rank,
            "round": unit.round_,
            "trainer": unit.trainer,
            "residual": unit.residual,
            "momentum": unit.momentum,
            "payload": _tensor(payload),
            "weights": weights,
            "rounds": None if rounds is None else [
                {"members": members, "payloads": [_tensor(p) for p in payloads]}
                for members, payloads in rounds
            ],
        },
        buffer,
    )
    return buffer.getvalue()


def load_rank_bundle(data: bytes) -> RankBundle:
    """The inputs, payload, (last unit) weights and (ddp) rounds of a rank bundle; ValueError
    when it is not one."""
    try:
        raw = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, ValueError, pickle.UnpicklingError, struct.error) as exc:
        raise ValueError(f"not a rank bundle: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != RANK_BUNDLE_FORMAT:
        raise ValueError(f"not a rank bundle: no {RANK_BUNDLE_FORMAT} tag")
    unit = RankUnit(raw["rank"], raw["round"], raw["trainer"], raw["residual"], raw["momentum"])
    rounds = None if raw["rounds"] is None else [
        RecordedRound(list(r["members"]), [_bytes(p) for p in r["payloads"]]) for r in raw["rounds"]
    ]
    return RankBundle(unit, _bytes(raw["payload"]), raw["weights"], rounds)


def _tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _bytes(tensor: torch.Tensor) -> bytes:
    return tensor.numpy().tobytes()

"""How a job's spec maps onto on-chain work units: what provider and verifier must agree on.

Single-node jobs (`distributed.strategy: single`): slot `s` trains on data shard `s` over the
whole step range; its unit `i` is the `checkpoint.every` optimizer steps from step
`i * every` (the last unit may be shorter). Unit 0 starts from the spec's seed; unit `i > 0`
from the checkpoint committed as unit `i - 1`.

Group jobs (`diloco`): slot `s` is rank `s` of the job's group, and its unit `i` is its
DiLoCo round `i`, so a slot delivers `max_steps / steps_per_round` units. The unit's CID
names a rank bundle (`rank_bundle`): the rank's inputs for the round (a `RankUnit`: the
global weights and outer momentum, its inner optimizer, data position and error-feedback
residual at the round's start) and the payload it sent. The unit's state hash is the payload's sha256, the
rank's commitment: a verifier re-runs the round from the inputs and names the rank whose
payload does not reproduce. A rank's last bundle also holds the group's trained model: every
rank ends with the same weights, so the result is what all slots' last units agree on.
"""

from __future__ import annotations

import io
import math
import pickle
import struct
from typing import NamedTuple

import torch

from node.distributed.diloco import DilocoConfig
from node.distributed.group import DistributedConfigError
from node.distributed.job import group_config
from node.distributed.rank_unit import RankUnit
from node.engine import JobSpec, Shard

RANK_BUNDLE_FORMAT = "zoo-compute/rank-unit-v1"


def is_group_job(spec: JobSpec) -> bool:
    """Whether the job's slots train together as one group rather than each on its own."""
    return spec.distributed.strategy != "single"


def diloco_config(spec: JobSpec) -> DilocoConfig:
    """The group settings of a group job; ddp is trained by the engine's ranks but has no
    per-round units yet, so the market takes diloco only."""
    config = group_config(spec)
    if not isinstance(config, DilocoConfig):
        raise DistributedConfigError(
            f"the market runs diloco group jobs; got strategy {spec.distributed.strategy}"
        )
    return config


def units_per_node(spec: JobSpec) -> int:
    """How many work units one slot delivers: what `createJob` is asked for."""
    if is_group_job(spec):
        return spec.training.max_steps // diloco_config(spec).steps_per_round(spec)
    return math.ceil(spec.training.max_steps / spec.checkpoint.every)


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
    unit: RankUnit  # the rank's inputs for the round
    payload: bytes  # what it sent
    weights: dict[str, torch.Tensor] | None  # the group's model after the job's last round


def rank_bundle(unit: RankUnit, payload: bytes, weights: dict[str, torch.Tensor] | None = None) -> bytes:
    """What a group job's unit pins: the rank's round inputs and the payload it sent; the last
    round's also holds the trained model, the job's result."""
    buffer = io.BytesIO()
    torch.save(
        {
            "format": RANK_BUNDLE_FORMAT,
            "rank": unit.rank,
            "round": unit.round_,
            "trainer": unit.trainer,
            "residual": unit.residual,
            "momentum": unit.momentum,
            "payload": torch.frombuffer(bytearray(payload), dtype=torch.uint8),
            "weights": weights,
        },
        buffer,
    )
    return buffer.getvalue()


def load_rank_bundle(data: bytes) -> RankBundle:
    """The inputs, payload and (last round) weights of a rank bundle; ValueError when it is not one."""
    try:
        raw = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, ValueError, pickle.UnpicklingError, struct.error) as exc:
        raise ValueError(f"not a rank bundle: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != RANK_BUNDLE_FORMAT:
        raise ValueError(f"not a rank bundle: no {RANK_BUNDLE_FORMAT} tag")
    unit = RankUnit(raw["rank"], raw["round"], raw["trainer"], raw["residual"], raw.get("momentum"))
    return RankBundle(unit, raw["payload"].numpy().tobytes(), raw.get("weights"))

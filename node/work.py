"""How a job's spec maps onto on-chain work units: what provider and verifier must agree on.

Slot `s` of a job trains on data shard `s` over the whole step range; its unit `i` is the
`checkpoint.every` optimizer steps from step `i * every` (the last unit may be shorter).
Unit 0 starts from the spec's seed; unit `i > 0` from the checkpoint committed as unit `i - 1`.
"""

from __future__ import annotations

import math

from node.engine import JobSpec, Shard


def units_per_node(spec: JobSpec) -> int:
    """How many work units one slot delivers: what `createJob` is asked for."""
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

"""How many on-chain work units a job's spec makes: what a job asks the market for, and providers deliver.

The count is protocol, not training: the gateway and the CLI quote it when a job is created, and
the provider's engine (`node.work`) cuts its units by the same rule.
"""

from __future__ import annotations

import math

from marketplace.protocol.spec import DilocoSpec, JobSpec


def is_group_job(spec: JobSpec) -> bool:
    """Whether the job's slots train together as one group rather than each on its own."""
    return spec.distributed.strategy != "single"


def group_unit_steps(spec: JobSpec) -> int:
    """Optimizer steps in one of a group rank's units: a DiLoCo round (H local steps), in ddp
    `checkpoint.every`."""
    if spec.distributed.strategy == "diloco":
        return (spec.distributed.diloco or DilocoSpec()).inner_steps or spec.checkpoint.every
    return spec.checkpoint.every


def units_per_node(spec: JobSpec) -> int:
    """How many work units one slot delivers: what `createJob` is asked for."""
    if is_group_job(spec):
        return spec.training.max_steps // group_unit_steps(spec)
    return math.ceil(spec.training.max_steps / spec.checkpoint.every)

"""A job's `distributed` section as the group's settings, and training a spec by it."""

from __future__ import annotations

import os

from node.engine.spec import AggregationSpec, CompressionSpec, DilocoSpec, JobSpec

from .aggregation import Aggregator
from .compression import Compressor
from .ddp import train_ddp
from .diloco import DilocoConfig, train_diloco
from .group import DistributedConfigError, DistributedResult, GroupConfig


def group_config(
    spec: JobSpec, *, updates_dir: str | os.PathLike[str] | None = None
) -> GroupConfig:
    """The settings of `spec`'s group: a DilocoConfig for diloco, a GroupConfig for ddp.

    Random selections are drawn from the job's seed, which every node of the job shares.
    """
    distributed = spec.distributed
    if distributed.strategy == "single":
        raise DistributedConfigError("distributed.strategy is single: one node trains this job")
    compression = distributed.compression or CompressionSpec()
    aggregation = distributed.aggregation or AggregationSpec()
    common = {
        "ranks": distributed.nodes,
        "compressor": Compressor(
            ratio=compression.ratio,
            bits=compression.bits,
            selection=compression.selection,
            chunk=compression.chunk,
            seed=spec.reproducibility.seed,
        ),
        "aggregator": Aggregator(
            method=aggregation.method,
            trim=aggregation.trim,
            clip_multiplier=aggregation.clip_multiplier,
            clip_iterations=aggregation.clip_iterations,
        ),
        "error_feedback": compression.error_feedback,
        "quorum": distributed.quorum,
        "deadline_s": distributed.unit_deadline_s,
        "updates_dir": None if updates_dir is None else str(updates_dir),
    }
    if distributed.strategy == "ddp":
        return GroupConfig(**common)
    diloco = distributed.diloco or DilocoSpec()
    return DilocoConfig(
        **common,
        inner_steps=diloco.inner_steps,
        outer_lr=diloco.outer_lr,
        outer_momentum=diloco.outer_momentum,
    )


def train_spec(
    spec: JobSpec, *, updates_dir: str | os.PathLike[str] | None = None
) -> DistributedResult:
    """Train `spec` on `distributed.nodes` local ranks with the strategy it names."""
    config = group_config(spec, updates_dir=updates_dir)
    if isinstance(config, DilocoConfig):
        return train_diloco(spec, config)
    return train_ddp(spec, config)

"""Data-parallel SGD: every step, the ranks' gradients are exchanged and aggregated."""

from __future__ import annotations

import logging
from typing import Any

import torch.distributed as dist
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from node.engine.spec import JobSpec

from .exchange import Exchange
from .group import (
    Delay,
    DistributedResult,
    GroupConfig,
    Tamper,
    check_schedule,
    collect,
    rank_report,
    rank_trainer,
    spawn,
)

logger = logging.getLogger(__name__)


def train_ddp(
    spec: JobSpec,
    config: GroupConfig,
    *,
    tamper: Tamper | None = None,
    delay: Delay | None = None,
) -> DistributedResult:
    """Train `spec` for `training.max_steps` steps, exchanging gradients at every step.

    With fp32 and the plain mean this is ordinary all-reduce data parallelism: the same as
    one process taking the mean gradient of all ranks' batches. Each rank clips its own
    gradient (`training.grad_clip`) before sending it, which also bounds one rank's pull.
    """
    check_schedule(spec)
    return collect(spawn(_ddp_rank, config, spec, config, tamper, delay))


def _ddp_rank(
    rank: int,
    ranks: int,
    store: dist.Store,
    spec: JobSpec,
    config: GroupConfig,
    tamper: Tamper | None,
    delay: Delay | None,
) -> dict[str, Any]:
    trainer, eval_batches = rank_trainer(spec, rank)
    exchange = Exchange(rank, config, store, tamper=tamper, delay=delay)
    params = list(trainer.model.parameters())
    train_losses, eval_losses, losses = [], [], []
    while trainer.step < spec.training.max_steps:
        loss, _ = trainer.forward_backward()
        grads = [p.grad for p in params]
        aggregate = exchange(parameters_to_vector(grads), trainer.step)  # (N,)
        vector_to_parameters(aggregate.value, grads)  # each .grad now its slice of the aggregate
        trainer.apply(loss)
        losses.append(loss)
        if trainer.step % spec.checkpoint.every == 0:
            train_losses.append(sum(losses) / len(losses))
            eval_losses.append(trainer.evaluate(eval_batches) if rank == 0 else float("nan"))
            losses = []
    logger.info("rank %d done: eval loss %.4f", rank, eval_losses[-1])
    return rank_report(trainer, exchange, train_losses, eval_losses)

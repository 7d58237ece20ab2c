"""Data-parallel SGD: every step, the ranks' gradients are exchanged and aggregated."""

from __future__ import annotations

import logging
from typing import Any

import torch.distributed as dist
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from node.engine.spec import JobSpec
from node.engine.train import Trainer

from .exchange import Exchange, ReplayExchange
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
from .rank_unit import RankUnit, RecordedRound, rank_threads, save_unit_inputs

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
    return collect(spawn(ddp_rank, config, spec, config, tamper, delay))


def ddp_steps(trainer: Trainer, exchange: Exchange | ReplayExchange, steps: int) -> list[float]:
    """`steps` optimizer steps, each on the aggregate of the ranks' gradients; their losses."""
    params = list(trainer.model.parameters())
    losses = []
    for _ in range(steps):
        loss, _ = trainer.forward_backward()
        grads = [p.grad for p in params]
        aggregate = exchange(parameters_to_vector(grads), trainer.step)  # (N,)
        vector_to_parameters(aggregate.value, grads)  # each .grad now its slice of the aggregate
        trainer.apply(loss)
        losses.append(loss)
    return losses


def ddp_rank(
    rank: int,
    ranks: int,
    store: dist.Store,
    spec: JobSpec,
    config: GroupConfig,
    tamper: Tamper | None,
    delay: Delay | None,
    start: RankUnit | None = None,
) -> dict[str, Any]:
    """One rank's steps in units of `checkpoint.every`, from the spec's seed or, taking a
    rank over, from `start`: that rank's inputs of a unit."""
    trainer, eval_batches = rank_trainer(spec, rank)
    exchange = Exchange(rank, config, store, tamper=tamper, delay=delay)
    if start is not None:
        start.restore(trainer, exchange.feedback)
    every = config.steps_per_unit(spec)
    units = spec.training.max_steps // every
    train_losses, eval_losses = [], []
    for index in range(0 if start is None else start.round_, units + 1):
        if config.updates_dir is not None:
            save_unit_inputs(config.updates_dir, rank, index, trainer, exchange.feedback)
        if index == units:
            break
        losses = ddp_steps(trainer, exchange, every)
        train_losses.append(sum(losses) / len(losses))
        eval_losses.append(trainer.evaluate(eval_batches) if rank == 0 else float("nan"))
    logger.info("rank %d done: eval loss %.4f", rank, eval_losses[-1])
    return rank_report(trainer, exchange, train_losses, eval_losses)


def rerun_ddp_unit(
    spec: JobSpec, config: GroupConfig, unit: RankUnit, rounds: list[RecordedRound]
) -> bytes:
    """What the rank sent in its unit, re-run from its inputs and the unit's recorded rounds."""
    with rank_threads():
        trainer, _ = rank_trainer(spec, unit.rank)
        exchange = ReplayExchange(unit.rank, config, rounds)
        unit.restore(trainer, exchange.feedback)
        ddp_steps(trainer, exchange, config.steps_per_unit(spec))
    return b"".join(exchange.sent)

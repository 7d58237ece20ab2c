"""Data-parallel SGD: every step, the ranks' gradients are exchanged and aggregated.

Each rank's model is wrapped in `DistributedDataParallel`, whose communication hook sends the
step's gradient through the group's `Exchange` (compressed, all-gathered, robustly aggregated)
instead of DDP's all-reduce; a verifier's re-run goes through the same hook with the rounds
played back.
"""

# Without `from __future__ import annotations`: DDP checks a hook's annotations at run time.
import functools
import itertools
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from marketplace.protocol.rank_bundle import RankUnit, RecordedRound
from marketplace.protocol.spec import JobSpec
from node.engine.gloo_listener import gloo_listeners_closed
from node.engine.train import Trainer

from .compression import ErrorFeedback
from .exchange import Exchange, ReplayExchange, TolerantReplay
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
from .rank_unit import keep_residual, rank_threads, restore, save_unit_inputs

logger = logging.getLogger(__name__)

# the rank's residual after one of its unit's residual steps (GroupConfig.residual_steps; its
# index among them) -> the residual the unit goes on with
AtResidual = Callable[[int, torch.Tensor], torch.Tensor]


class StepExchange:
    """The state of `step_exchange_hook`: the trainer whose step is the round, the exchange,
    and the step's buckets that wait for the last one."""

    def __init__(self, trainer: Trainer, exchange: Exchange | ReplayExchange | TolerantReplay):
        self.trainer = trainer
        self.exchange = exchange
        params = list(trainer.model.parameters())
        starts = itertools.accumulate((p.numel() for p in params), initial=0)
        self.slices = {id(p): slice(start, start + p.numel()) for p, start in zip(params, starts)}
        self.numel = sum(p.numel() for p in params)
        self.waiting: list[tuple[dist.GradBucket, torch.futures.Future[torch.Tensor]]] = []

    def exchange_waiting(self) -> None:
        """Send the gradient of the waiting buckets, flat in the model's parameter order,
        through the exchange; write the aggregate back into them and resolve their futures."""
        waiting, self.waiting = self.waiting, []
        grads = [  # (where in the flat gradient, the bucket's view of that parameter's grad)
            (self.slices[id(param)], grad)
            for bucket, _ in waiting
            for param, grad in zip(bucket.parameters(), bucket.gradients(), strict=True)
        ]
        flat = torch.empty(self.numel)
        for where, grad in grads:
            flat[where] = grad.reshape(-1)
        aggregate = self.exchange(flat, self.trainer.step).value  # (N,)
        for where, grad in grads:
            grad.copy_(aggregate[where].view_as(grad))
        for bucket, future in waiting:
            future.set_result(bucket.buffer())


def step_exchange_hook(
    state: StepExchange, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook that sends each step's whole gradient through an exchange.

    DDP hands the hook its gradient buckets one by one as backward fills them. Compression (a
    random selection drawn per step), the robust aggregator and the rank's commitment work on
    the step's whole gradient, so the buckets wait for the last one; then every bucket gets
    its slices of the aggregate, which DDP writes into the parameters' `.grad`.
    """
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    state.waiting.append((bucket, future))
    if bucket.is_last():
        state.exchange_waiting()
    return future


@contextmanager
def ddp_group() -> Iterator[None]:
    """The process group DDP wraps a rank's model in: the ranks' gloo group when they formed
    one; otherwise (rounds through the store's board, a verifier's re-run) a group of this
    process alone, the hook's exchange being all the traffic between ranks."""
    if dist.is_initialized():
        yield
        return
    # every init wraps sys.excepthook in one more layer, which destroying the group leaves in
    # place: a long-lived worker would nest one per re-run
    excepthook = sys.excepthook
    with gloo_listeners_closed():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        sys.excepthook = excepthook


def wrap(trainer: Trainer, exchange: Exchange | ReplayExchange | TolerantReplay) -> None:
    """Wrap the trainer's model in DDP, its gradients exchanged by `exchange` every step."""
    trainer.ddp = DistributedDataParallel(trainer.model)
    trainer.ddp.register_comm_hook(StepExchange(trainer, exchange), step_exchange_hook)


def train_ddp(
    spec: JobSpec,
    config: GroupConfig,
    *,
    tamper: Tamper | None = None,
    delay: Delay | None = None,
) -> DistributedResult:
    """Train `spec` for `training.max_steps` steps, exchanging gradients at every step.

    With fp32 and the plain mean this is ordinary all-reduce data parallelism: the same as
    one process taking the mean gradient of all ranks' batches (and clipping that).
    """
    check_schedule(spec)
    return collect(spawn(ddp_rank, spec, config, tamper, delay))


def ddp_steps(trainer: Trainer, steps: int) -> list[float]:
    """`steps` optimizer steps, each on the aggregate of the ranks' gradients; their losses."""
    losses = []
    for _ in range(steps):
        loss, _ = trainer.forward_backward()  # DDP's hook exchanged the gradients in backward
        trainer.apply(loss)
        losses.append(loss)
    return losses


def ddp_unit(
    spec: JobSpec,
    config: GroupConfig,
    trainer: Trainer,
    feedback: ErrorFeedback | None,
    at_residual: AtResidual | None = None,
) -> list[float]:
    """A rank's ddp unit: its steps (`ddp_steps`) and their losses. After each of its residual
    steps, `at_residual` gets the rank's residual (to commit it, or to judge a committed one)
    and gives the one the unit goes on with."""
    losses: list[float] = []
    done = 0
    for index, step in enumerate(config.residual_steps(spec)):
        losses += ddp_steps(trainer, step - done)
        done = step
        if at_residual is not None and feedback is not None:
            assert feedback.residual is not None  # the rank has sent since the unit began
            feedback.residual = at_residual(index, feedback.residual)
    return losses + ddp_steps(trainer, config.steps_per_unit(spec) - done)


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
        restore(start, trainer, exchange.feedback)
    every = config.steps_per_unit(spec)
    units = spec.training.max_steps // every
    train_losses, eval_losses = [], []
    with ddp_group():
        wrap(trainer, exchange)
        for index in range(0 if start is None else start.round_, units + 1):
            if config.updates_dir is not None:
                save_unit_inputs(config.updates_dir, rank, index, trainer, exchange.feedback)
            if index == units:
                break
            keep = None
            if config.updates_dir is not None:
                keep = functools.partial(keep_residual, config.updates_dir, rank, index)
            losses = ddp_unit(spec, config, trainer, exchange.feedback, keep)
            train_losses.append(sum(losses) / len(losses))
            eval_losses.append(trainer.evaluate(eval_batches) if rank == 0 else float("nan"))
    logger.info("rank %d done: eval loss %.4f", rank, eval_losses[-1])
    return rank_report(trainer, exchange, train_losses, eval_losses)


def rerun_ddp_unit(
    spec: JobSpec, config: GroupConfig, unit: RankUnit, rounds: list[RecordedRound]
) -> tuple[bytes, RankUnit, list[torch.Tensor]]:
    """What the rank sent in its unit, re-run from its inputs and the unit's recorded rounds,
    where the unit leaves it (the inputs of its next unit), and the residuals it commits."""
    exchange = ReplayExchange(unit.rank, config, rounds)
    residuals: list[torch.Tensor] = []
    following = replay_ddp_unit(spec, config, unit, exchange, at_residual=kept_in(residuals))
    return b"".join(exchange.sent), following, residuals


def kept_in(residuals: list[torch.Tensor]) -> AtResidual:
    """An `AtResidual` that keeps a copy of each residual in `residuals` and goes on with it:
    the residuals a rank commits."""

    def keep(index: int, residual: torch.Tensor) -> torch.Tensor:
        residuals.append(residual.clone())
        return residual

    return keep


def replay_ddp_unit(
    spec: JobSpec,
    config: GroupConfig,
    unit: RankUnit,
    exchange: ReplayExchange | TolerantReplay,
    threads: int = 1,
    at_residual: AtResidual | None = None,
) -> RankUnit:
    """Re-run the rank's unit from its inputs on `threads` threads, its exchanges played back by
    `exchange` and its residuals handed to `at_residual` (`ddp_unit`); where the unit leaves
    the rank."""
    with rank_threads():
        trainer, _ = rank_trainer(spec, unit.rank, threads)
        restore(unit, trainer, exchange.feedback)
        with ddp_group():
            wrap(trainer, exchange)
            ddp_unit(spec, config, trainer, exchange.feedback, at_residual)
        residual = None if exchange.feedback is None else exchange.feedback.residual
        return RankUnit(unit.rank, unit.round_ + 1, trainer.state(), residual)

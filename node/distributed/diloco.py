"""DiLoCo: H local AdamW steps per rank, then one outer Nesterov step on the aggregated deltas."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from marketplace.protocol import trace
from marketplace.protocol.rank_bundle import RankUnit
from marketplace.protocol.spec import JobSpec
from marketplace.protocol.units import diloco_round_steps
from node.engine.train import Trainer
from node.engine.unit import SegmentSink, record_segment

from .compression import ErrorFeedback
from .exchange import Exchange, encode_update
from .group import (
    Delay,
    DistributedConfigError,
    DistributedResult,
    GroupConfig,
    Tamper,
    check_schedule,
    collect,
    rank_report,
    rank_trainer,
    spawn,
)
from .rank_unit import rank_threads, restore, save_segment, save_unit_inputs

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DilocoConfig(GroupConfig):
    """DiLoCo's settings: the local steps per round and the outer optimizer.

    The outer optimizer follows Douillard et al. (2023): SGD with Nesterov momentum on the
    aggregated pseudo-gradient (global weights minus a rank's weights after H local steps);
    momentum 0 is plain SGD, and with lr 1 that is periodic model averaging.
    """

    inner_steps: int | None = None  # H, local steps per round; None: the spec's checkpoint.every
    outer_lr: float = 0.7  # outer SGD learning rate
    outer_momentum: float = 0.9  # outer Nesterov momentum

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.inner_steps is not None and self.inner_steps < 1:
            raise DistributedConfigError(f"inner_steps must be >= 1; got {self.inner_steps}")
        if self.outer_lr <= 0:
            raise DistributedConfigError(f"outer_lr must be > 0; got {self.outer_lr}")
        if not 0 <= self.outer_momentum < 1:
            raise DistributedConfigError(
                f"outer_momentum must be in [0, 1); got {self.outer_momentum}"
            )

    def steps_per_unit(self, spec: JobSpec) -> int:
        """A DiLoCo rank's unit is a round: H local steps."""
        return diloco_round_steps(spec, self.inner_steps)

    def unit_rounds(self, spec: JobSpec, index: int) -> range:
        return range(index, index + 1)

    def segment_ends(self, spec: JobSpec, index: int) -> list[int]:
        """The steps at which round `index` commits to a segment (`local_round`)."""
        steps = self.steps_per_unit(spec)
        every = trace.segment_length(steps)
        return list(range(index * steps + every, (index + 1) * steps + 1, every))


def train_diloco(
    spec: JobSpec,
    config: DilocoConfig,
    *,
    tamper: Tamper | None = None,
    delay: Delay | None = None,
) -> DistributedResult:
    """Train `spec` for `training.max_steps` local steps on every rank, in rounds of H.

    Ranks exchange once per round instead of once per step, which is where DiLoCo's saving
    in communication comes from. `tamper` (a picklable `(rank, delta) -> delta`) replaces
    what a rank sends, to play a Byzantine rank; `delay` (`(rank, round) -> seconds`) holds
    a rank back before it sends, to play a straggler.
    """
    check_schedule(spec, config.steps_per_unit(spec))
    return collect(spawn(diloco_rank, config, spec, config, tamper, delay))


def diloco_rank(
    rank: int,
    ranks: int,
    store: dist.Store,
    spec: JobSpec,
    config: DilocoConfig,
    tamper: Tamper | None,
    delay: Delay | None,
    start: RankUnit | None = None,
) -> dict[str, Any]:
    """One rank's rounds, from the spec's seed or, taking a rank over, from `start`: that
    rank's inputs of a round, with which this process goes on exactly as the rank would have."""
    trainer, eval_batches = rank_trainer(spec, rank)
    exchange = Exchange(rank, config, store, tamper=tamper, delay=delay)
    if start is not None:
        restore(start, trainer, exchange.feedback)
    params = list(trainer.model.parameters())
    global_weights = torch.nn.Parameter(parameters_to_vector(params).detach().clone())  # (N,)
    outer = torch.optim.SGD(
        [global_weights],
        lr=config.outer_lr,
        momentum=config.outer_momentum,
        nesterov=config.outer_momentum > 0,
    )
    if start is not None and start.momentum is not None:
        outer.state[global_weights]["momentum_buffer"] = start.momentum.clone()
    steps = config.steps_per_unit(spec)
    train_losses, eval_losses = [], []
    rounds = spec.training.max_steps // steps
    for round_ in range(0 if start is None else start.round_, rounds + 1):
        if config.updates_dir is not None:
            momentum = outer.state[global_weights].get("momentum_buffer")
            save_unit_inputs(config.updates_dir, rank, round_, trainer, exchange.feedback, momentum)
        if round_ == rounds:
            break
        keep = (
            None
            if config.updates_dir is None
            else functools.partial(save_segment, config.updates_dir, rank, round_)
        )
        delta, losses = local_round(trainer, steps, keep)
        global_weights.grad = exchange(delta, round_).value.to(global_weights.device)
        outer.step()
        outer.zero_grad(set_to_none=True)
        with torch.no_grad():
            # a copy: the parameters become views of what they are given
            vector_to_parameters(global_weights.detach().clone(), params)
        train_losses.append(sum(losses) / len(losses))
        eval_losses.append(trainer.evaluate(eval_batches) if rank == 0 else float("nan"))
    logger.info("rank %d done: eval loss %.4f", rank, eval_losses[-1])
    return rank_report(trainer, exchange, train_losses, eval_losses)


def local_round(
    trainer: Trainer, steps: int, on_segment: SegmentSink | None = None
) -> tuple[torch.Tensor, list[float]]:
    """`steps` local optimizer steps, the round's trace restarted at its start (`local_steps`);
    the pseudo-gradient (start minus end weights) and losses."""
    params = list(trainer.model.parameters())
    start = parameters_to_vector(params).detach().clone()  # (N,)
    trainer.trace = []  # a round's trace binds its own segments
    every = trace.segment_length(steps)
    losses, _ = local_steps(trainer, trainer.step + steps, every, on_segment)
    with torch.no_grad():
        return start - parameters_to_vector(params), losses  # (N,)


def local_steps(
    trainer: Trainer, end: int, every: int, on_segment: SegmentSink | None = None
) -> tuple[list[float], list[dict[str, Any]]]:
    """Local optimizer steps up to step `end`, committing a segment of the trace at each
    multiple of `every` (marketplace.protocol.trace), which `on_segment` receives with the state
    it names: a verifier of another class narrows a disagreement about a round to one of them.
    The steps' losses and the segments' records."""
    losses: list[float] = []
    segments = []
    since = 0  # index in `losses` of the current segment's first step
    while trainer.step < end:
        loss, _ = trainer.forward_backward()
        trainer.apply(loss)
        losses.append(loss)
        if trainer.step % every == 0:
            segments.append(record_segment(trainer, losses[since:], on_segment))
            since = len(losses)
    return losses, segments


def rerun_diloco_unit(
    spec: JobSpec,
    config: DilocoConfig,
    unit: RankUnit,
    threads: int = 1,
    on_segment: SegmentSink | None = None,
) -> bytes:
    """What the rank sent in its round, re-run from the round's inputs with `threads` threads
    (ranks train with one); `on_segment` receives the round's segments as they are committed."""
    with rank_threads():
        trainer, _ = rank_trainer(spec, unit.rank, threads)
        feedback = ErrorFeedback(config.compressor) if config.error_feedback else None
        restore(unit, trainer, feedback)
        delta, _ = local_round(trainer, config.steps_per_unit(spec), on_segment)
        return encode_update(config.compressor, feedback, delta, unit.round_).to_bytes()

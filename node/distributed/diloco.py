"""DiLoCo: H local AdamW steps per rank, then one outer Nesterov step on the aggregated deltas."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from marketplace.protocol import trace
from marketplace.protocol.rank_bundle import RankUnit, RecordedRound
from marketplace.protocol.spec import JobSpec
from marketplace.protocol.units import diloco_round_steps
from node.engine.train import Trainer
from node.engine.unit import SegmentSink, record_segment

from .compression import ErrorFeedback
from .exchange import Exchange, aggregate_recorded, encode_update
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
    EXCHANGE: ClassVar[str] = "round"

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

    def residual_steps(self, spec: JobSpec) -> range:
        """None: a round's residual changes only at its one exchange, and its local steps
        commit segments (`segment_ends`)."""
        return range(0)

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
    return collect(spawn(diloco_rank, spec, config, tamper, delay))


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
    outer = OuterStep(
        config, parameters_to_vector(params), None if start is None else start.momentum
    )
    steps = config.steps_per_unit(spec)
    train_losses, eval_losses = [], []
    rounds = spec.training.max_steps // steps
    for round_ in range(0 if start is None else start.round_, rounds + 1):
        if config.updates_dir is not None:
            save_unit_inputs(
                config.updates_dir, rank, round_, trainer, exchange.feedback, outer.momentum
            )
        if round_ == rounds:
            break
        keep = (
            None
            if config.updates_dir is None
            else functools.partial(save_segment, config.updates_dir, rank, round_)
        )
        delta, losses, _ = local_round(trainer, steps, keep)
        with torch.no_grad():
            vector_to_parameters(outer(exchange(delta, round_).value), params)
        train_losses.append(sum(losses) / len(losses))
        eval_losses.append(trainer.evaluate(eval_batches) if rank == 0 else float("nan"))
    logger.info("rank %d done: eval loss %.4f", rank, eval_losses[-1])
    return rank_report(trainer, exchange, train_losses, eval_losses)


class OuterStep:
    """The global weights and the outer optimizer over them, the same on every rank: each
    round's aggregated pseudo-gradient moves them by one Nesterov SGD step."""

    def __init__(self, config: DilocoConfig, weights: torch.Tensor, momentum: torch.Tensor | None):
        self.weights = torch.nn.Parameter(weights.detach().clone())  # (N,)
        self.optimizer = torch.optim.SGD(
            [self.weights],
            lr=config.outer_lr,
            momentum=config.outer_momentum,
            nesterov=config.outer_momentum > 0,
        )
        if momentum is not None:
            self.optimizer.state[self.weights]["momentum_buffer"] = momentum.clone()

    @property
    def momentum(self) -> torch.Tensor | None:
        """The momentum buffer; None before the first step, or without momentum."""
        return self.optimizer.state[self.weights].get("momentum_buffer")

    def __call__(self, aggregate: torch.Tensor) -> torch.Tensor:
        """Step on the round's aggregate (N,); the new global weights, a copy (parameters
        given them become views of them)."""
        self.weights.grad = aggregate.to(self.weights.device)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return self.weights.detach().clone()


def following_round(
    spec: JobSpec,
    config: DilocoConfig,
    unit: RankUnit,
    after: dict[str, Any],
    sent: bytes,
    exchanged: RecordedRound,
) -> RankUnit:
    """The inputs of the rank's round after `unit`, rebuilt as the rank makes them from what it
    committed: `after`, its trainer's state once the round's steps are done; the residual that
    `sent`, its payload, leaves; and the outer step on the aggregate of what the round's members
    sent (`exchanged`). Elementwise arithmetic on those bytes and the aggregator, so a verifier
    of another CPU class rebuilds the same bits. CompressionError for a payload that does not
    parse."""
    start, corrected = round_vector(spec, config, unit, after["model"])
    numel, compressor = start.numel(), config.compressor
    residual = None
    if config.error_feedback:  # as ErrorFeedback.compress leaves it
        residual = corrected - compressor.decompress(
            compressor.parse(sent, numel), numel, unit.round_
        )
    outer = OuterStep(config, start, unit.momentum)
    aggregate = aggregate_recorded(config, exchanged.payloads, numel, unit.round_)
    model = spec.build_model()
    model.load_state_dict(after["model"])
    with torch.no_grad():
        vector_to_parameters(outer(aggregate.value), model.parameters())
    trainer = after | {"model": {k: v.detach().clone() for k, v in model.state_dict().items()}}
    return RankUnit(unit.rank, unit.round_ + 1, trainer, residual, outer.momentum)


def round_vector(
    spec: JobSpec, config: DilocoConfig, unit: RankUnit, end: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The round's start weights (as the model's parameters) and what the rank compresses for
    the round ending in the model state `end`: the pseudo-gradient (start minus end weights)
    plus the residual it carried in."""
    model = spec.build_model()
    weights = []
    for state in (unit.trainer["model"], end):
        model.load_state_dict(state)
        weights.append(parameters_to_vector(model.parameters()).detach().float())
    vector = weights[0] - weights[1]
    if config.error_feedback and unit.residual is not None:
        vector = vector + unit.residual.float()
    return weights[0], vector


def local_round(
    trainer: Trainer, steps: int, on_segment: SegmentSink | None = None
) -> tuple[torch.Tensor, list[float], list[dict[str, Any]]]:
    """`steps` local optimizer steps, the round's trace restarted at its start (`local_steps`);
    the pseudo-gradient (start minus end weights), the losses and the segments' records."""
    params = list(trainer.model.parameters())
    start = parameters_to_vector(params).detach().clone()  # (N,)
    trainer.trace = []  # a round's trace binds its own segments
    every = trace.segment_length(steps)
    losses, segments = local_steps(trainer, trainer.step + steps, every, on_segment)
    with torch.no_grad():
        return start - parameters_to_vector(params), losses, segments  # (N,)


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
) -> tuple[bytes, list[dict[str, Any]]]:
    """What the rank sent in its round and the segments it committed to, re-run from the round's
    inputs with `threads` threads (ranks train with one); `on_segment` receives the segments
    with their states as they are committed."""
    with rank_threads():
        trainer, _ = rank_trainer(spec, unit.rank, threads)
        feedback = ErrorFeedback(config.compressor) if config.error_feedback else None
        restore(unit, trainer, feedback)
        delta, _, segments = local_round(trainer, config.steps_per_unit(spec), on_segment)
        payload = encode_update(config.compressor, feedback, delta, unit.round_)
        return payload.to_bytes(), segments

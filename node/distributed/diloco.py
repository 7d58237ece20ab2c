"""DiLoCo: H local AdamW steps per rank, then one outer Nesterov step on the aggregated deltas."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from node.engine.spec import JobSpec

from .group import (
    DistributedConfigError,
    DistributedResult,
    Exchange,
    GroupConfig,
    Tamper,
    check_schedule,
    collect,
    rank_report,
    rank_trainer,
    spawn,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DilocoConfig(GroupConfig):
    """DiLoCo's settings; H, the local steps per round, is the spec's checkpoint.every.

    The outer optimizer follows Douillard et al. (2023): SGD with Nesterov momentum on the
    aggregated pseudo-gradient (global weights minus a rank's weights after H local steps).
    """

    outer_lr: float = 0.7  # outer SGD learning rate
    outer_momentum: float = 0.9  # outer Nesterov momentum

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.outer_lr <= 0:
            raise DistributedConfigError(f"outer_lr must be > 0; got {self.outer_lr}")
        if not 0 <= self.outer_momentum < 1:
            raise DistributedConfigError(
                f"outer_momentum must be in [0, 1); got {self.outer_momentum}"
            )


def train_diloco(
    spec: JobSpec, config: DilocoConfig, *, tamper: Tamper | None = None
) -> DistributedResult:
    """Train `spec` for `training.max_steps` local steps on every rank, in rounds of H.

    Ranks exchange once per round instead of once per step, which is where DiLoCo's saving
    in communication comes from. `tamper` (a picklable `(rank, delta) -> delta`) replaces
    what a rank sends, to play a Byzantine rank in tests and benchmarks.
    """
    check_schedule(spec)
    return collect(spawn(_diloco_rank, config.ranks, spec, config, tamper))


def _diloco_rank(
    rank: int, ranks: int, spec: JobSpec, config: DilocoConfig, tamper: Tamper | None
) -> dict[str, Any]:
    trainer, eval_batches = rank_trainer(spec, rank)
    exchange = Exchange(
        rank, config.compressor, config.aggregator, tamper, error_feedback=config.error_feedback
    )
    params = list(trainer.model.parameters())
    global_weights = torch.nn.Parameter(parameters_to_vector(params).detach().clone())  # (N,)
    outer = torch.optim.SGD(
        [global_weights],
        lr=config.outer_lr,
        momentum=config.outer_momentum,
        nesterov=config.outer_momentum > 0,
    )
    train_losses, eval_losses = [], []
    for _ in range(spec.training.max_steps // spec.checkpoint.every):
        losses = []
        for _ in range(spec.checkpoint.every):
            loss, _ = trainer.forward_backward()
            trainer.apply(loss)
            losses.append(loss)
        with torch.no_grad():
            delta = global_weights - parameters_to_vector(params)  # (N,) the pseudo-gradient
        global_weights.grad = exchange(delta).value
        outer.step()
        outer.zero_grad(set_to_none=True)
        with torch.no_grad():
            # a copy: the parameters become views of what they are given
            vector_to_parameters(global_weights.detach().clone(), params)
        train_losses.append(sum(losses) / len(losses))
        eval_losses.append(trainer.evaluate(eval_batches) if rank == 0 else float("nan"))
    logger.info("rank %d done: eval loss %.4f", rank, eval_losses[-1])
    return rank_report(trainer, exchange, train_losses, eval_losses)

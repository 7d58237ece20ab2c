"""DiLoCo: H local AdamW steps per rank, then one outer Nesterov step on the aggregated deltas."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from marketplace.errors import ZooError
from node.engine.data import Sampler, load_corpora
from node.engine.spec import JobSpec
from node.engine.train import Trainer

from .aggregation import Aggregator
from .compression import Compressor
from .group import Exchange, Tamper, spawn

logger = logging.getLogger(__name__)


class DistributedConfigError(ZooError, ValueError):
    """Distributed settings that do not fit the job."""


@dataclass(frozen=True)
class DilocoConfig:
    """How ranks train together; H, the local steps per round, is the spec's checkpoint.every.

    The outer optimizer follows Douillard et al. (2023): SGD with Nesterov momentum on the
    averaged pseudo-gradient (global weights minus a rank's weights after H local steps).
    """

    ranks: int  # processes training together, each on its own data shard (index = rank)
    compressor: Compressor = field(default_factory=Compressor)  # what a pseudo-gradient becomes
    aggregator: Aggregator = field(default_factory=Aggregator)  # how the ranks' deltas combine
    outer_lr: float = 0.7  # outer SGD learning rate
    outer_momentum: float = 0.9  # outer Nesterov momentum

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise DistributedConfigError(f"ranks must be >= 1; got {self.ranks}")
        if self.outer_lr <= 0:
            raise DistributedConfigError(f"outer_lr must be > 0; got {self.outer_lr}")
        if not 0 <= self.outer_momentum < 1:
            raise DistributedConfigError(
                f"outer_momentum must be in [0, 1); got {self.outer_momentum}"
            )


@dataclass(frozen=True)
class DistributedResult:
    eval_losses: list[float]  # held-out loss of the global model after each round
    train_losses: list[float]  # mean local training loss of each round, over all ranks
    bytes_sent: list[int]  # payload bytes each rank sent, by rank
    parameters: int  # entries of the flattened model, what an fp32 all-reduce would send
    commitments: list[list[str]]  # per rank, the sha256 of its payload in each exchange
    outliers: list[list[int]]  # per exchange, the ranks the aggregator flagged

    @property
    def eval_loss(self) -> float:
        return self.eval_losses[-1]


def train_diloco(
    spec: JobSpec, config: DilocoConfig, *, tamper: Tamper | None = None
) -> DistributedResult:
    """Train `spec` for `training.max_steps` local steps on every rank, in rounds of H.

    `tamper` (a picklable `(rank, delta) -> delta`) replaces what a rank sends, to play a
    Byzantine rank in tests and benchmarks.
    """
    every = spec.checkpoint.every
    if spec.training.max_steps % every:
        raise DistributedConfigError(
            f"training.max_steps ({spec.training.max_steps}) must be a multiple of "
            f"checkpoint.every ({every}), the local steps of one round"
        )
    if spec.training.eval_batches < 1:
        raise DistributedConfigError("training.eval_batches must be >= 1 to report eval loss")
    return collect(spawn(_diloco_rank, config.ranks, spec, config, tamper))


def collect(per_rank: list[dict[str, Any]]) -> DistributedResult:
    """Combine the ranks' reports; every rank holds the same global model, so rank 0 scores it."""
    losses = [report["train_losses"] for report in per_rank]
    return DistributedResult(
        eval_losses=per_rank[0]["eval_losses"],
        train_losses=[sum(round_) / len(round_) for round_ in zip(*losses, strict=True)],
        bytes_sent=[report["bytes_sent"] for report in per_rank],
        parameters=per_rank[0]["parameters"],
        commitments=[report["commitments"] for report in per_rank],
        outliers=per_rank[0]["outliers"],
    )


def rank_trainer(spec: JobSpec, rank: int) -> tuple[Trainer, list[Any]]:
    """The engine's trainer on shard `rank`, one thread per rank, and the held-out batches.

    Every rank builds the model from the spec's seed, so all start from the same weights.
    """
    torch.set_num_threads(1)  # ranks share the machine's cores
    torch.use_deterministic_algorithms(spec.reproducibility.deterministic)
    corpora = load_corpora(spec.data)
    sampler = Sampler(
        corpora, spec.data.seq_len, spec.training.batch_size, spec.reproducibility.seed
    )
    trainer = Trainer(spec, sampler, torch.device("cpu"))
    trainer.stream, trainer.cursor = rank, 0
    return trainer, sampler.eval_batches(spec.training.eval_batches)


def _diloco_rank(
    rank: int, ranks: int, spec: JobSpec, config: DilocoConfig, tamper: Tamper | None
) -> dict[str, Any]:
    trainer, eval_batches = rank_trainer(spec, rank)
    exchange = Exchange(rank, config.compressor, config.aggregator, tamper)
    params = list(trainer.model.parameters())
    global_weights = torch.nn.Parameter(parameters_to_vector(params).detach().clone())  # (N,)
    outer = torch.optim.SGD(
        [global_weights], lr=config.outer_lr, momentum=config.outer_momentum, nesterov=True
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
            vector_to_parameters(global_weights.detach().clone(), params)
        train_losses.append(sum(losses) / len(losses))
        eval_losses.append(trainer.evaluate(eval_batches) if rank == 0 else float("nan"))
        if rank == 0:
            logger.info(
                "round %d: train %.4f eval %.4f",
                len(eval_losses),
                *train_losses[-1:],
                eval_losses[-1],
            )
    return {
        "train_losses": train_losses,
        "eval_losses": eval_losses,
        "bytes_sent": exchange.bytes_sent,
        "parameters": global_weights.numel(),
        "commitments": exchange.commitments,
        "outliers": exchange.outliers,
    }

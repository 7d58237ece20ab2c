"""A local process group on gloo, and the compressed, robust exchange every strategy uses."""

from __future__ import annotations

import json
import logging
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from marketplace.errors import ZooError
from node.engine.data import Sampler, load_corpora
from node.engine.spec import JobSpec
from node.engine.train import Trainer

from .aggregation import Aggregate, Aggregator
from .compression import Compressor, ErrorFeedback, Payload

logger = logging.getLogger(__name__)

Tamper = Callable[[int, torch.Tensor], torch.Tensor]  # (rank, update) -> what the rank sends


class DistributedConfigError(ZooError, ValueError):
    """Distributed settings that do not fit the job."""


@dataclass(frozen=True)
class GroupConfig:
    """What every strategy needs: how many ranks, and how their updates travel and combine."""

    ranks: int  # processes training together, each on its own data shard (index = rank)
    compressor: Compressor = field(default_factory=Compressor)  # what an update becomes
    aggregator: Aggregator = field(default_factory=Aggregator)  # how the ranks' updates combine
    error_feedback: bool = True  # carry what compression dropped into the rank's next update

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise DistributedConfigError(f"ranks must be >= 1; got {self.ranks}")


@dataclass(frozen=True)
class DistributedResult:
    eval_losses: list[float]  # held-out loss of the shared model every checkpoint.every steps
    train_losses: list[float]  # mean training loss over those steps and all ranks
    bytes_sent: list[int]  # payload bytes each rank sent, by rank
    parameters: int  # entries of the flattened model, what an fp32 all-reduce would send
    commitments: list[list[str]]  # per rank, the sha256 of its payload in each exchange
    outliers: list[list[int]]  # per exchange, the ranks the aggregator flagged

    @property
    def eval_loss(self) -> float:
        return self.eval_losses[-1]


def check_schedule(spec: JobSpec) -> None:
    """Both strategies report (and DiLoCo synchronises) every checkpoint.every steps."""
    every = spec.checkpoint.every
    if spec.training.max_steps % every:
        raise DistributedConfigError(
            f"training.max_steps ({spec.training.max_steps}) must be a multiple of "
            f"checkpoint.every ({every})"
        )
    if spec.training.eval_batches < 1:
        raise DistributedConfigError("training.eval_batches must be >= 1 to report eval loss")


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


def rank_report(
    trainer: Trainer,
    exchange: Exchange,
    train_losses: list[float],
    eval_losses: list[float],
) -> dict[str, Any]:
    """What a rank sends back when it is done."""
    return {
        "train_losses": train_losses,
        "eval_losses": eval_losses,
        "bytes_sent": exchange.bytes_sent,
        "parameters": sum(p.numel() for p in trainer.model.parameters()),
        "commitments": exchange.commitments,
        "outliers": exchange.outliers,
    }


def collect(per_rank: list[dict[str, Any]]) -> DistributedResult:
    """Combine the ranks' reports; every rank holds the same model, so rank 0 scores it."""
    losses = [report["train_losses"] for report in per_rank]
    return DistributedResult(
        eval_losses=per_rank[0]["eval_losses"],
        train_losses=[sum(period) / len(period) for period in zip(*losses, strict=True)],
        bytes_sent=[report["bytes_sent"] for report in per_rank],
        parameters=per_rank[0]["parameters"],
        commitments=[report["commitments"] for report in per_rank],
        outliers=per_rank[0]["outliers"],
    )


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now, for the group's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(worker: Callable[..., dict[str, Any]], ranks: int, *args: Any) -> list[dict[str, Any]]:
    """Run `worker(rank, ranks, *args)` in `ranks` fresh processes joined in one gloo group.

    Returns each rank's JSON-able report, by rank. A rank that raises makes this raise too.
    Reports come back through files rather than a pipe: a pipe that nobody reads until the
    ranks exit blocks a rank whose report is larger than the pipe's buffer.
    """
    with tempfile.TemporaryDirectory(prefix="zoo-ranks-") as folder:
        mp.spawn(_run, args=(ranks, free_port(), worker, args, folder), nprocs=ranks, join=True)
        return [json.loads(Path(folder, f"{rank}.json").read_text()) for rank in range(ranks)]


def _run(
    rank: int,
    ranks: int,
    port: int,
    worker: Callable[..., dict[str, Any]],
    args: tuple[Any, ...],
    folder: str,
) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=ranks,
        timeout=timedelta(minutes=5),
    )
    try:
        Path(folder, f"{rank}.json").write_text(json.dumps(worker(rank, ranks, *args)))
    finally:
        dist.destroy_process_group()


class Exchange:
    """One rank's side of sending its update, receiving everyone's and aggregating them.

    Updates are compressed with error feedback, all-gathered (rather than all-reduced) so
    every rank can run the robust aggregator on every rank's update, and counted: the bytes
    this rank sent, and the sha256 of each payload, which is the rank's commitment to it.
    """

    def __init__(
        self,
        rank: int,
        compressor: Compressor,
        aggregator: Aggregator,
        tamper: Tamper | None = None,
        *,
        error_feedback: bool = True,
    ):
        self.rank = rank
        self.compressor = compressor
        self.aggregator = aggregator
        self.tamper = tamper  # simulates a Byzantine rank in tests and benchmarks
        self.feedback = ErrorFeedback(compressor) if error_feedback else None
        self.bytes_sent = 0
        self.commitments: list[str] = []  # this rank's payload digest, per exchange
        self.outliers: list[list[int]] = []  # ranks the aggregator flagged, per exchange

    def __call__(self, update: torch.Tensor) -> Aggregate:
        """The aggregate of every rank's `update` (a flat vector of the same length)."""
        if self.tamper is not None:
            update = self.tamper(self.rank, update)
        round_ = len(self.commitments)  # draws the round's random selection
        if self.feedback is None:
            payload = self.compressor.compress(update, round_)
        else:
            payload, _ = self.feedback.compress(update, round_)
        self.bytes_sent += payload.nbytes
        self.commitments.append(payload.sha256())
        numel = update.numel()
        received = [self.compressor.decompress(p, numel, round_) for p in _all_gather(payload)]
        result = self.aggregator(torch.stack(received))  # (ranks, numel)
        self.outliers.append(list(result.outliers))
        return result


def _all_gather(payload: Payload) -> list[Payload]:
    """Every rank's payload, by rank; the shapes agree because the settings and sizes do."""
    ranks = dist.get_world_size()
    gathered = []
    for tensor in payload.tensors():
        if tensor.numel() == 0:
            gathered.append([tensor] * ranks)
            continue
        parts = [torch.empty_like(tensor) for _ in range(ranks)]
        dist.all_gather(parts, tensor.contiguous())
        gathered.append(parts)
    return [Payload(*parts) for parts in zip(*gathered, strict=True)]

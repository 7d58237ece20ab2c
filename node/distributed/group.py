"""A local process group on gloo, and the compressed, robust exchange every strategy uses."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .aggregation import Aggregate, Aggregator
from .compression import Compressor, ErrorFeedback, Payload

logger = logging.getLogger(__name__)

Tamper = Callable[[int, torch.Tensor], torch.Tensor]  # (rank, update) -> what the rank sends


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now, for the group's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(worker: Callable[..., dict[str, Any]], ranks: int, *args: Any) -> list[dict[str, Any]]:
    """Run `worker(rank, ranks, *args)` in `ranks` fresh processes joined in one gloo group.

    Returns each rank's result, by rank. A rank that raises makes this raise too.
    """
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    port = free_port()
    mp.spawn(_run, args=(ranks, port, worker, args, results), nprocs=ranks, join=True)
    by_rank = dict(results.get() for _ in range(ranks))
    return [by_rank[rank] for rank in range(ranks)]


def _run(
    rank: int,
    ranks: int,
    port: int,
    worker: Callable[..., dict[str, Any]],
    args: tuple[Any, ...],
    results: Any,
) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=ranks,
        timeout=timedelta(minutes=5),
    )
    try:
        results.put((rank, worker(rank, ranks, *args)))
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
    ):
        self.rank = rank
        self.compressor = compressor
        self.aggregator = aggregator
        self.tamper = tamper  # simulates a Byzantine rank in tests and benchmarks
        self.feedback = ErrorFeedback(compressor)
        self.bytes_sent = 0
        self.commitments: list[str] = []  # this rank's payload digest, per exchange
        self.outliers: list[list[int]] = []  # ranks the aggregator flagged, per exchange

    def __call__(self, update: torch.Tensor) -> Aggregate:
        """The aggregate of every rank's `update` (a flat vector of the same length)."""
        if self.tamper is not None:
            update = self.tamper(self.rank, update)
        payload, _ = self.feedback.compress(update)
        self.bytes_sent += payload.nbytes
        self.commitments.append(payload.sha256())
        numel = update.numel()
        received = [self.compressor.decompress(p, numel) for p in _all_gather(payload)]
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

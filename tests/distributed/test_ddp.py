"""DDP across local gloo ranks: the same model as one process stepping on the global batch."""

from __future__ import annotations

import math
import sys

import psutil
import pytest
import torch
import torch.distributed as dist
from tiny_job import tiny_spec
from torch.nn.parallel import DistributedDataParallel

from node.distributed.compression import Compressor
from node.distributed.ddp import StepExchange, ddp_group, step_exchange_hook, train_ddp
from node.distributed.exchange import Exchange
from node.distributed.group import GroupConfig, rank_trainer, spawn
from node.distributed.rank_unit import rank_threads
from node.engine import JobSpec

RANKS, STEPS, EVERY = 3, 30, 10
TOLERANCE = 1e-3  # relative, on the eval loss: only the order of float additions differs
CLIP = 0.5  # max global grad norm, low enough to bind in the first steps
UNTRAINED_LOSS = math.log(256)  # a uniform guess over bytes


@pytest.fixture(scope="module")
def spec() -> JobSpec:
    return tiny_spec(STEPS, EVERY, grad_clip=CLIP)


def single_process_eval_loss(spec: JobSpec) -> float:
    """One process whose every step uses the mean gradient of the ranks' batches together,
    clipped as a whole."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    unclipped = tiny_spec(STEPS, EVERY, grad_clip=0.0)  # the sum is clipped once it is whole
    try:
        trainer, eval_batches = rank_trainer(unclipped, 0)
        for step in range(STEPS):
            for rank in range(RANKS):  # gradients add up over the ranks' batches
                trainer.stream, trainer.cursor = rank, step
                loss, _ = trainer.forward_backward()
            for p in trainer.model.parameters():
                p.grad /= RANKS
            torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), spec.training.grad_clip)
            trainer.apply(loss)
        return trainer.evaluate(eval_batches)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def test_the_hook_exchanges_each_steps_whole_gradient_once_whatever_the_buckets(
    spec: JobSpec,
) -> None:
    """DDP splits the gradient into many small buckets here; the hook still sends one flat
    gradient per step, and every parameter gets its own slice of the aggregate back."""
    with rank_threads():
        plain, _ = rank_trainer(spec, 0)
        plain.forward_backward()
        expected = [p.grad.clone() for p in plain.model.parameters()]

        trainer, _ = rank_trainer(spec, 0)
        exchange = Exchange(0, GroupConfig(ranks=1), dist.HashStore())
        with ddp_group():
            trainer.ddp = DistributedDataParallel(trainer.model, bucket_cap_mb=0.01)
            buckets = []

            def counted(state, bucket):  # unannotated: DDP checks a hook's annotations
                buckets.append(bucket.index())
                return step_exchange_hook(state, bucket)

            trainer.ddp.register_comm_hook(StepExchange(trainer, exchange), counted)
            got = []
            for _ in range(2):  # the same batch twice: DDP rebuilds its buckets after the first
                trainer.forward_backward()
                got.append([p.grad.clone() for p in trainer.model.parameters()])
                trainer.optimizer.zero_grad(set_to_none=True)
    assert len(set(buckets)) > 1
    assert len(exchange.commitments) == 2
    for grads in got:
        assert all(torch.equal(a, b) for a, b in zip(grads, expected, strict=True))


def listening_rank(rank: int, ranks: int, *_: object) -> dict[str, object]:
    """The TCP ports a formed gloo rank listens on, and a sum all its group's ranks make."""
    ports = [
        c.laddr.port
        for c in psutil.Process().net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    ]
    total = torch.full((2,), float(rank))
    dist.all_reduce(total)
    return {"listening": ports, "sum": total.tolist()}


def test_formed_gloo_ranks_listen_only_on_the_groups_store(spec: JobSpec) -> None:
    """Gloo's listener, which any stranger could fill until the rank aborted, is closed once
    the group formed (tests/engine/test_gloo_listener.py); rank 0 still hosts the store."""
    reports = spawn(listening_rank, spec, GroupConfig(ranks=RANKS))
    assert [len(report["listening"]) for report in reports] == [1, 0, 0]
    assert all(report["sum"] == [3.0, 3.0] for report in reports)


@pytest.mark.slow
def test_fp32_ddp_matches_one_process_on_the_global_batch(spec: JobSpec) -> None:
    result = train_ddp(spec, GroupConfig(ranks=RANKS))
    reference = single_process_eval_loss(spec)
    assert result.eval_loss == pytest.approx(reference, rel=TOLERANCE)
    assert result.eval_loss < 0.8 * UNTRAINED_LOSS
    assert result.bytes_sent == [STEPS * 4 * result.parameters] * RANKS
    assert all(len(digests) == STEPS for digests in result.commitments)


@pytest.mark.slow
def test_compressed_ddp_still_learns(spec: JobSpec) -> None:
    compressor = Compressor(ratio=0.1, bits=8)
    result = train_ddp(spec, GroupConfig(ranks=RANKS, compressor=compressor))
    assert result.eval_loss < 0.8 * UNTRAINED_LOSS
    assert result.bytes_sent == [STEPS * compressor.payload_bytes(result.parameters)] * RANKS


@pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="a group on NCCL needs a CUDA device per rank (none here)"
)
def test_on_cuda_ranks_ddp_runs_over_nccl_and_keeps_the_ranks_alike(spec: JobSpec) -> None:
    result = train_ddp(spec, GroupConfig(ranks=2, device="cuda"))
    assert result.eval_loss < 0.8 * UNTRAINED_LOSS
    assert len(set(result.weights_sha256)) == 1  # every rank holds the same model


def test_a_re_run_group_leaves_the_process_excepthook_as_it_was():
    """A verifier worker forms a one-process group for every rank unit it re-runs: torch wraps
    sys.excepthook at each, and without restoring it a long-lived worker nests one per re-run."""
    before = sys.excepthook
    for _ in range(3):
        with ddp_group():
            assert dist.is_initialized()
    assert sys.excepthook is before
    assert not dist.is_initialized()

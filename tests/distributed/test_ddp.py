"""DDP across local gloo ranks: the same model as one process stepping on the global batch."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_job import tiny_spec

from node.distributed.compression import Compressor
from node.distributed.ddp import train_ddp
from node.distributed.group import GroupConfig, rank_trainer
from node.engine import JobSpec

RANKS, STEPS, EVERY = 3, 30, 10
TOLERANCE = 1e-3  # relative, on the eval loss: only the order of float additions differs
UNTRAINED_LOSS = math.log(256)  # a uniform guess over bytes


@pytest.fixture(scope="module")
def spec() -> JobSpec:
    """Without clipping in the trainer: ranks clip their own gradients."""
    return tiny_spec(STEPS, EVERY, grad_clip=0.0)


def single_process_eval_loss(spec: JobSpec) -> float:
    """One process whose every step uses the mean gradient of the ranks' batches together."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        trainer, eval_batches = rank_trainer(spec, 0)
        for step in range(STEPS):
            for rank in range(RANKS):  # gradients add up over the ranks' batches
                trainer.stream, trainer.cursor = rank, step
                loss, _ = trainer.forward_backward()
            for p in trainer.model.parameters():
                p.grad /= RANKS
            trainer.apply(loss)
        return trainer.evaluate(eval_batches)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


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

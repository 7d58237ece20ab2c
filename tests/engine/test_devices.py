"""A unit on several devices: the workers split every step's micro-batches and sum the gradients in
micro-batch order, so the unit's state is the one a single device reaches, bit for bit; the
backend that joins the workers (and a group's ranks) is NCCL when every rank has a CUDA device and
gloo otherwise. On the CPU here, the devices are worker processes over gloo."""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import yaml

from marketplace.protocol.checkpoint import Checkpoint
from node.engine import (
    SpecError,
    SpecOverLimits,
    UnitLimits,
    parallel,
    parse_spec,
    run_unit,
    unit_shard,
)
from node.engine.data import Sampler, load_corpora
from node.engine.devices import open_group, place, unit_devices
from node.engine.parallel import Team, TeamError
from node.engine.train import Trainer
from verifier.recompute import UnitInputs, recompute

from .conftest import merge

TWO_DEVICES = {
    "model": {"architecture": "gpt", "n_layer": 1, "n_embd": 32, "n_head": 2},
    "data": {
        "seq_len": 16,
        "sources": [{"kind": "synthetic", "generator": "markov", "num_bytes": 20_000, "seed": 1}],
    },
    "training": {
        "lr": 1.0e-2,
        "batch_size": 4,
        "grad_accum_steps": 2,
        "max_steps": 8,
        "warmup_steps": 1,
        "eval_batches": 1,
    },
    "checkpoint": {"every": 4},
    "resources": {"devices": 2},
    "reproducibility": {"seed": 5, "num_threads": 1},
}
PROVIDER = "0x" + "22" * 20


@pytest.fixture(scope="module")
def spec():
    return parse_spec(TWO_DEVICES)


@pytest.fixture(scope="module")
def two_devices(spec):
    """Units 0 and 1 of slot 0, each trained on two CPU workers (unit 1 resumes from unit 0)."""
    shard = unit_shard(spec, 0)
    first = run_unit(spec, None, shard, 4, device="cpu")
    return first, run_unit(spec, first.checkpoint, shard, 4, device="cpu")


def test_two_devices_reach_the_state_of_one_bit_for_bit_and_resume(spec, two_devices):
    shard = unit_shard(spec, 0)
    first = run_unit(spec, None, shard, 4, device="cpu", devices=1)
    second = run_unit(spec, first.checkpoint, shard, 4, device="cpu", devices=1)
    assert [u.state_hash for u in two_devices] == [first.state_hash, second.state_hash]
    assert two_devices[1].metrics["losses"] == second.metrics["losses"]
    run = two_devices[1].checkpoint.metadata["execution"]
    # the device count is recorded, outside the class: the bits do not depend on it
    assert run["devices"] == 2
    assert run["class_id"] == second.checkpoint.metadata["execution"]["class_id"]


def test_a_verifier_passes_an_honest_two_device_unit_and_fails_a_cheat(spec, two_devices, storage):
    """Through storage, as a verifier worker re-runs it: on one device, to the same bits."""
    spec_cid = storage.add_bytes(yaml.safe_dump(TWO_DEVICES).encode())
    first, second = two_devices

    def inputs(checkpoint: Checkpoint) -> UnitInputs:
        cid = storage.add_bytes(checkpoint.to_bytes())
        return UnitInputs(
            1, 0, 1, PROVIDER, spec_cid, cid, checkpoint.state_hash(),
            previous_cid=storage.add_bytes(first.checkpoint.to_bytes()),
            previous_state_hash=first.state_hash, previous_provider=PROVIDER,
        )  # fmt: skip

    honest = recompute(inputs(second.checkpoint), storage)
    assert honest.passed, honest.reason
    assert honest.judgement["mode"] == "exact"
    noised = Checkpoint.load(second.checkpoint.to_bytes())
    weights = noised.state["model"]
    name = next(iter(weights))
    weights[name] = weights[name] + 1e-3 * torch.randn_like(weights[name])
    cheat = recompute(inputs(noised), storage)
    assert cheat.passed is False
    assert "differs" in cheat.reason


def test_a_model_with_dropout_trains_on_two_devices_to_the_bits_of_one(two_devices):
    """Dropout's masks are hashed from each micro-batch's place, not drawn from a generator
    (node.engine.dropout), so a model with dropout splits across devices like any other, and so
    does transformers' gpt2, which has dropout by default."""
    dropout = parse_spec(merge(TWO_DEVICES, {"model": {"dropout": 0.1}}))
    shard = unit_shard(dropout, 0)
    two = run_unit(dropout, None, shard, 4, device="cpu")
    assert two.state_hash == run_unit(dropout, None, shard, 4, device="cpu", devices=1).state_hash
    assert two.state_hash != two_devices[0].state_hash  # the masks were applied
    gpt2 = {
        "architecture": "hf",
        "family": "gpt2",
        "config": {"n_embd": 32, "n_layer": 1, "n_head": 2},
    }
    assert parse_spec({**TWO_DEVICES, "model": gpt2}).devices == 2


def test_a_model_that_draws_random_numbers_is_refused_on_several_devices():
    """A worker that skips the others' micro-batches would draw other numbers from the generator
    than one device: the workers watch it, whatever the model, and refuse the split."""
    one_device = {key: value for key, value in TWO_DEVICES.items() if key != "resources"}
    spec = parse_spec(one_device)
    sampler = Sampler(load_corpora(spec.data), spec.data.seq_len, spec.training.batch_size, 5)
    store = dist.HashStore()
    cpu = torch.device("cpu")
    group = open_group(store, 0, 1, place(store, 0, 1, cpu), timedelta(seconds=30))
    trainer = Trainer(spec, sampler, cpu, Team(0, 1, cpu, group))

    def draw(*_: object) -> None:
        torch.rand(1)

    trainer.model.register_forward_hook(draw)
    with pytest.raises(TeamError, match="draws random numbers"):
        trainer.forward_backward()


def test_a_worker_that_dies_fails_the_unit_at_once_rather_than_hanging_it(spec):
    cpu = torch.device("cpu")
    sampler = Sampler(load_corpora(spec.data), spec.data.seq_len, spec.training.batch_size, 5)
    began = time.monotonic()
    with (
        pytest.raises(TeamError, match="a worker of the unit failed"),
        parallel.team([cpu, cpu], sys.exit) as member,  # the other worker exits at once
    ):
        Trainer(spec, sampler, cpu, member).forward_backward()
    assert time.monotonic() - began < parallel.STEP_TIMEOUT.total_seconds() / 10


def test_the_spec_asks_for_devices_that_share_its_micro_batches():
    assert parse_spec(merge(TWO_DEVICES, {"resources": {"devices": 1}})).devices == 1
    without = {key: value for key, value in TWO_DEVICES.items() if key != "resources"}
    assert "resources" not in parse_spec(without).model_dump()  # old specs hash as before
    with pytest.raises(SpecError, match="must divide training.grad_accum_steps"):
        parse_spec(merge(TWO_DEVICES, {"resources": {"devices": 3}}))
    group = {"distributed": {"nodes": 2, "strategy": "ddp"}}
    with pytest.raises(SpecError, match="single-node jobs"):
        parse_spec(merge(TWO_DEVICES, group))


def test_limits_bound_devices_and_the_threads_of_all_workers(spec):
    UnitLimits(max_threads=2, max_devices=2).check(spec)
    with pytest.raises(SpecOverLimits, match="2 devices"):
        UnitLimits(max_devices=1).check(spec)
    with pytest.raises(SpecOverLimits, match="2 threads"):
        UnitLimits(max_threads=1).check(spec)
    UnitLimits(max_threads=1, max_devices=1).check(spec, devices=1)  # a verifier's single re-run


def test_gloo_unless_every_rank_has_a_cuda_device():
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert unit_devices("cpu", 2) == [cpu, cpu]
    assert place(dist.HashStore(), 0, 1, cpu).backend == "gloo"
    mixed = dist.HashStore()
    mixed.set("zoo-device/1", "cpu")
    # a group with one CPU rank trains on gloo, on the CPU, even where a rank has a GPU
    assert place(mixed, 0, 2, cuda) == place(mixed, 0, 2, cpu)
    assert place(mixed, 0, 2, cuda).device == cpu
    every = dist.HashStore()
    every.set("zoo-device/1", "cuda")
    assert place(every, 0, 2, cuda).backend == "nccl"  # decided from the posts alone
    assert place(every, 0, 2, cuda).device == cuda


@pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="two devices of a unit need two CUDA devices (none here)"
)
def test_on_two_gpus_a_unit_reaches_the_state_of_one_over_nccl(spec):
    shard = unit_shard(spec, 0)
    one = run_unit(spec, None, shard, 4, device="cuda", devices=1)
    two = run_unit(spec, None, shard, 4, device="cuda")
    assert two.state_hash == one.state_hash


@pytest.mark.skipif(not torch.cuda.is_available(), reason="NCCL needs a CUDA device (none here)")
def test_a_cuda_rank_alone_opens_an_nccl_group():
    store = dist.HashStore()
    placement = place(store, 0, 1, torch.device("cuda", 0))
    group = open_group(store, 0, 1, placement, timedelta(seconds=60))
    tensor = torch.ones(4, device=placement.device)
    group.broadcast(tensor, 0).wait()
    assert placement.backend == "nccl" and tensor.sum().item() == 4
    group.shutdown()
    with pytest.raises(SpecOverLimits, match="CUDA devices"):
        unit_devices("cuda", torch.cuda.device_count() + 1)

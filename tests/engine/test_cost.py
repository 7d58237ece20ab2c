"""A unit's cost is estimated from its spec alone, and honestly: the memory estimate is within a
factor of two of the peak torch's allocator records while the unit trains, the time estimate
(with this machine's measured speed) within a factor of two of the unit's time, for a small
model, whose steps are mostly operator launches, and for one whose steps are mostly matrix
multiplies. A spec over the memory or time limit is refused before anything is built."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from node.engine import JobSpec, SpecOverLimits, UnitLimits, load_spec, run_unit, unit_shard
from node.engine.cost import unit_cost
from node.engine.speed import MachineSpeed, Speed, measure_speed

from .conftest import SPECS

SHIPPED = sorted(SPECS.glob("*.yaml"))
MEMORY_FACTOR = 2
TIME_FACTOR = 2

# mostly matrix multiplies: a unit of four steps takes about a second of a CPU core
WIDE = {
    "model": {"architecture": "gpt", "n_layer": 2, "n_embd": 256, "n_head": 4},
    "data": {"seq_len": 128},
    "training": {"batch_size": 16},
    "checkpoint": {"every": 4},
}


def peak_bytes(run: Callable[[], object]) -> int:
    """The highest the bytes held by torch's CPU allocator rose while `run` ran: its allocations
    and frees as the profiler records them, added up in order."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = prof.profiler.kineto_results.events()
    changes = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    return max(itertools.accumulate(n for _, n in changes))


def unit(spec: JobSpec) -> Callable[[], object]:
    """A first unit of `spec`, once a step of it ran: a provider's node reads a job's data once
    (bounded on its own, by the source limit) and keeps its caches warm from unit to unit."""
    run_unit(spec, None, unit_shard(spec, 0), 1)
    return lambda: run_unit(spec, None, unit_shard(spec, 0), spec.checkpoint.every)


@pytest.mark.parametrize("overrides", [{}, WIDE], ids=["small", "wide"])
def test_the_memory_estimate_is_within_a_factor_of_the_measured_peak(small_spec, overrides):
    spec = small_spec(**overrides)
    estimate = unit_cost(spec).memory_bytes
    measured = peak_bytes(unit(spec))
    assert measured / MEMORY_FACTOR <= estimate <= measured * MEMORY_FACTOR, (estimate, measured)


@pytest.mark.parametrize("overrides", [{}, WIDE], ids=["small", "wide"])
def test_the_time_estimate_is_within_a_factor_of_the_measured_unit(small_spec, overrides):
    """On one thread, by the CPU time of this process, for the speed's timings and the unit's
    alike: what the unit computes, not how busy a shared machine is meanwhile (a provider's
    bidder times by the wall). The best of three of each, taken by turns."""
    spec = small_spec(**overrides, reproducibility={"num_threads": 1})
    cost, train = unit_cost(spec), unit(spec)
    estimates, runs = [], []
    for _ in range(3):
        speed = measure_speed(torch.device("cpu"), 1, clock=time.process_time)
        estimates.append(speed.seconds(cost))
        began = time.process_time()
        train()
        runs.append(time.process_time() - began)
    estimate, measured = min(estimates), min(runs)
    assert measured / TIME_FACTOR <= estimate <= measured * TIME_FACTOR, (estimate, measured)


def test_the_estimates_grow_with_the_work(small_spec):
    small, wide = unit_cost(small_spec()), unit_cost(small_spec(**WIDE))
    assert wide.memory_bytes > 10 * small.memory_bytes
    assert wide.flops > 100 * small.flops
    longer = unit_cost(small_spec(checkpoint={"every": 20}))
    assert longer.flops == pytest.approx(2 * small.flops, rel=0.1)
    assert longer.memory_bytes == small.memory_bytes


def test_a_unit_over_the_memory_limit_is_refused(small_spec):
    spec = small_spec(**WIDE)
    needs = unit_cost(spec).memory_bytes
    UnitLimits(max_memory_bytes=needs).check(spec)
    with pytest.raises(SpecOverLimits, match=r"MiB of memory per unit \(at most"):
        UnitLimits(max_memory_bytes=needs - 1).check(spec)


def test_a_unit_over_the_time_limit_is_refused_given_the_machines_speed(small_spec):
    spec = small_spec(**WIDE)
    speed = measure_speed(torch.device("cpu"), spec.reproducibility.num_threads)
    seconds = speed.seconds(unit_cost(spec))
    UnitLimits(max_unit_seconds=2 * seconds).check(spec, speed=speed)
    UnitLimits(max_unit_seconds=seconds / 2).check(spec)  # no speed: the time is not checked
    with pytest.raises(SpecOverLimits, match=r"s per unit on this machine \(at most"):
        UnitLimits(max_unit_seconds=seconds / 2).check(spec, speed=speed)


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_spec_is_costed_and_fits_a_machine_with_enough_cores(path):
    """Built-in and `transformers` models alike are traced on the meta device."""
    spec = load_spec(path)
    UnitLimits(max_threads=1024, max_devices=64).check(spec)
    cost = unit_cost(spec)
    assert cost.memory_bytes > 16 * cost.parameters and cost.flops > 0 and cost.ops > 0


def test_costing_a_spec_leaves_the_generators_and_threads_of_a_training_unit_alone(small_spec):
    """A bidder costs a job while this process may train a unit, whose bits depend on the random
    generators' state and the thread count: costing touches neither."""
    rng, threads = torch.get_rng_state(), torch.get_num_threads()
    spec = small_spec(model={"n_embd": 48, "n_head": 3}, training={"batch_size": 5})
    UnitLimits().check(spec)
    assert unit_cost(spec).flops > 0
    assert torch.equal(torch.get_rng_state(), rng) and torch.get_num_threads() == threads


def test_a_unit_takes_the_best_speed_measured_at_its_threads_or_fewer():
    slow, fast = Speed(1e9, 1e-4, 1e8), Speed(4e9, 2e-5, 3e8)
    machine = MachineSpeed({1: fast, 2: slow, 4: Speed(8e9, 1e-5, 1e8)})
    assert machine.at(1) == fast and machine.at(2) == fast and machine.at(3) == fast
    assert machine.at(64) == Speed(8e9, 1e-5, 3e8)

"""The cases tolerant verification is measured on: honest execution classes a CPU can stand in
with, small specs, and the cheats a verifier must catch, run as a cheating provider would run
them (its trace made consistently over what it really computed). Shared by the calibration
script, the verification bench and the tests, so all three judge the same things."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

import torch

from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.spec import JobSpec
from node.engine import Shard, parse_spec, run_unit
from node.engine.data import Sampler
from node.engine.environment import Host
from node.engine.train import Trainer

# Honest classes with different bits on one CPU: thread counts change reduction orders, oneDNN
# brings other kernels, and the matmul precision lets them use bf16 where the CPU has it.
HOSTS = {
    "t1": Host(num_threads=1),
    "t2": Host(num_threads=2),
    "t1-nodnn": Host(num_threads=1, mkldnn=False),
    "t2-medium-nodnn": Host(num_threads=2, matmul_precision="medium", mkldnn=False),
}
# A GPU's class, where one is at hand: fp32 matmuls with deterministic kernels, as providers run.
# TF32 matmuls (matmul precision "high") are not an honest class of an fp32 spec: they round
# inputs to 10 mantissa bits, drift as far as the bf16 cheat does, and fail CPU verifiers.
CUDA_HOSTS = {"cuda": Host()}


def device_of(name: str) -> str:
    """The device a class of HOSTS or CUDA_HOSTS runs on."""
    return "cuda" if name in CUDA_HOSTS else "cpu"


_BASE: dict[str, Any] = {
    "data": {"seq_len": 32, "sources": [{"kind": "stdlib", "max_bytes": 1_000_000}]},
    "training": {"lr": 1.0e-2, "batch_size": 8, "max_steps": 64, "warmup_steps": 4},
    "reproducibility": {"seed": 7, "num_threads": 1},
}

# Small specs of both built-in architectures; every (H) 8 gives one-step segments, 16 two-step,
# and 48 six-step ones in a unit three times as long as the table measures, as shipped specs'
# units are (honest drift grows larger later in training, which short units never reach).
SPECS: dict[str, dict[str, Any]] = {
    "gpt-1x32": {
        "model": {"architecture": "gpt", "n_layer": 1, "n_embd": 32, "n_head": 2},
        "checkpoint": {"every": 8},
    },
    "gpt-1x32-h48": {
        "model": {"architecture": "gpt", "n_layer": 1, "n_embd": 32, "n_head": 2},
        "checkpoint": {"every": 48},
        "training": {"max_steps": 144},
    },
    "gpt-2x48": {
        "model": {"architecture": "gpt", "n_layer": 2, "n_embd": 48, "n_head": 4},
        "checkpoint": {"every": 16},
        "training": {"eval_batches": 0},
    },
    "mlp-2x128": {
        "model": {"architecture": "mlp", "context": 8, "n_embd": 16, "hidden": 128, "n_layer": 2},
        "checkpoint": {"every": 8},
        "training": {"lr": 3.0e-3},
    },
}


def spec(name: str, seed: int = 7, dropout: float = 0.0) -> JobSpec:
    """A named small spec with the given training seed and dropout."""
    raw = _merge(_BASE, SPECS[name])
    raw["reproducibility"]["seed"] = seed
    if dropout:
        raw["model"]["dropout"] = dropout
    raw.setdefault("training", {}).setdefault("eval_batches", 0)
    return parse_spec(raw)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and key in out else value
    return out


# What a provider commits: its checkpoint, and the intermediate states its segment records name
# (by state hash), which it serves to a dispute.
Committed = tuple[Checkpoint, dict[str, Checkpoint]]


class Cheat(Protocol):
    """What a cheater commits for `steps` steps of `shard` from `start`, in `host`'s class on
    `device`."""

    def __call__(
        self,
        spec: JobSpec,
        start: Checkpoint | None,
        shard: Shard,
        steps: int,
        host: Host,
        device: str = "cpu",
    ) -> Committed: ...


@contextmanager
def _patched(owner: type, name: str, make: Callable[[Any], Any]) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def honest(
    spec: JobSpec,
    start: Checkpoint | None,
    shard: Shard,
    steps: int,
    host: Host,
    device: str = "cpu",
) -> Committed:
    """The unit as the spec asks, in `host`'s class."""
    states: dict[str, Checkpoint] = {}

    def keep(segment: dict[str, Any], state: Checkpoint) -> None:
        states[segment["state_hash"]] = state

    result = run_unit(spec, start, shard, steps, device=device, host=host, on_segment=keep)
    return result.checkpoint, states


# How a cheater departs from the honest work of `steps` steps from step `begin`: patched into
# the trainer or its data while it trains, so that its trace is made consistently over what it
# really computed. A single node's unit here; a DiLoCo round's local steps in rank_casebook.
Cheating = Callable[[int, int], AbstractContextManager[None]]


@contextmanager
def skipping_one_step(begin: int, steps: int) -> Iterator[None]:
    """Skips the work of one step in the middle (1 of H) but moves every counter on."""
    skip = begin + steps // 2

    def forward(original: Any) -> Any:
        def run(self: Trainer) -> Any:
            if self.step == skip:
                return (self.loss_history[-1] if self.loss_history else 5.0), None
            return original(self)

        return run

    with _patched(Trainer, "forward_backward", forward), _skipped_update(skip):
        yield


@contextmanager
def skipping_last_update(begin: int, steps: int) -> Iterator[None]:
    """Reports every loss honestly but leaves out the last update: the skip a re-run that
    weighs the end against the whole unit's movement would not see."""
    with _skipped_update(begin + steps - 1):
        yield


@contextmanager
def _skipped_update(skip: int) -> Iterator[None]:
    """Optimizer step `skip + 1` leaves the weights as they were; every counter moves on."""

    def apply(original: Any) -> Any:
        def run(self: Trainer, loss: float) -> None:
            if self.step == skip:
                self.optimizer.step = lambda *a, **k: None  # type: ignore[method-assign]
                try:
                    original(self, loss)
                finally:
                    del self.optimizer.step
                return
            original(self, loss)

        return run

    with _patched(Trainer, "apply", apply):
        yield


@contextmanager
def halving_batches(begin: int, steps: int) -> Iterator[None]:
    """Trains on half of each batch's sequences."""

    def batch(original: Any) -> Any:
        def run(self: Sampler, *args: Any) -> Any:
            x, y = original(self, *args)
            return x[: max(1, len(x) // 2)], y[: max(1, len(y) // 2)]

        return run

    with _patched(Sampler, "batch", batch):
        yield


@contextmanager
def next_shard(begin: int, steps: int) -> Iterator[None]:
    """Trains on the next slot's data (cached from other work) under its own slot's name."""

    def batch(original: Any) -> Any:
        def run(self: Sampler, stream: int, *args: Any) -> Any:
            return original(self, stream + 1, *args)

        return run

    with _patched(Sampler, "batch", batch):
        yield


@contextmanager
def bf16_autocast(begin: int, steps: int) -> Iterator[None]:
    """Runs forward and backward under bf16 autocast where the spec asks for fp32."""

    def init(original: Any) -> Any:
        def run(self: Trainer, *args: Any) -> None:
            original(self, *args)
            self.autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=True)

        return run

    with _patched(Trainer, "__init__", init):
        yield


# The noise's norm over the norm of what the unit's steps moved the weights: past the bound (5x
# the largest honest drift measured, about 2% of a unit's movement in tolerance.json), since
# noise inside it is by construction no larger than what honest hardware differs by.
NOISE_RATIO = 0.05


@contextmanager
def noising(begin: int, steps: int) -> Iterator[None]:
    """Trains honestly, then adds Gaussian noise to the weights before the last segment is
    committed (a watermark, a backdoor's nudge): NOISE_RATIO of the steps' movement."""
    end = begin + steps
    origin: dict[str, torch.Tensor] = {}

    def apply(original: Any) -> Any:
        def run(self: Trainer, loss: float) -> None:
            if not origin:
                origin.update({k: v.detach().clone() for k, v in self.model.state_dict().items()})
            original(self, loss)
            if self.step == end:
                with torch.no_grad():
                    gen = torch.Generator().manual_seed(self.step)
                    params = dict(self.model.named_parameters())
                    moved = sum(float((params[k] - origin[k]).square().sum()) for k in params)
                    draws = {
                        k: torch.randn(p.shape, generator=gen).to(p.device)
                        for k, p in params.items()
                    }
                    size = sum(float(d.square().sum()) for d in draws.values())
                    scale = NOISE_RATIO * (moved / size) ** 0.5
                    for k, p in params.items():
                        p.add_(draws[k] * scale)

        return run

    with _patched(Trainer, "apply", apply):
        yield


CHEATING: dict[str, Cheating] = {
    "skip_one_step": skipping_one_step,
    "skip_last_update": skipping_last_update,
    "fewer_tokens": halving_batches,
    "other_shard": next_shard,
    "bf16": bf16_autocast,
    "noise": noising,
}


def cheating(name: str) -> Cheat:
    """The provider that trains its unit honestly but under CHEATING[name]."""
    way = CHEATING[name]

    def cheat(
        spec: JobSpec,
        start: Checkpoint | None,
        shard: Shard,
        steps: int,
        host: Host,
        device: str = "cpu",
    ) -> Committed:
        with way(start.step if start else 0, steps):
            return honest(spec, start, shard, steps, host, device)

    cheat.__doc__ = way.__doc__
    return cheat


def copy_other(
    spec: JobSpec,
    start: Checkpoint | None,
    shard: Shard,
    steps: int,
    host: Host,
    device: str = "cpu",
) -> Committed:
    """Commits the next slot's honest result of the same steps, relabelled as its own slot's."""
    other = Shard.of(spec, shard.index + 1, shard.start_step, shard.end_step)
    source = start.clone() if start else None
    if source is not None:
        source.state["progress"]["stream"] = other.index
    result, states = honest(spec, source, other, steps, host, device)
    result.state["progress"]["stream"] = shard.index
    return result, states


def smaller_model(
    spec: JobSpec,
    start: Checkpoint | None,
    shard: Shard,
    steps: int,
    host: Host,
    device: str = "cpu",
) -> Committed:
    """Trains a model of half the width under the job's spec hash (from its own init)."""
    width = spec.model.model_dump()["n_embd"]  # both built-in architectures have one
    model = spec.model.model_copy(update={"n_embd": width // 2})
    cheap = spec.model_copy(update={"model": model})
    sha = spec.sha256()
    with _patched(JobSpec, "sha256", lambda original: lambda self: sha):
        return honest(cheap, None, shard, (start.step if start else 0) + steps, host, device)


CHEATS: dict[str, Cheat] = {name: cheating(name) for name in CHEATING} | {
    "copy_other": copy_other,
    "smaller_model": smaller_model,
}

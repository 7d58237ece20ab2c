"""How much of a machine one unit of a stranger's job spec may use.

A spec is written by whoever pays for the job, so the model it builds, the data it reads and the
threads it asks for are bounded before anything is allocated: the parameter count and the unit's
peak memory come from the model built without memory (PyTorch's meta device and fake tensors;
see `node.engine.cost`), its seconds on this machine from that cost and the machine's measured speed
(`node.engine.speed`), the rest from the spec's own numbers. A provider sets the limits (`node
start --max-parameters ...`) and its bidder refuses a job beyond them before bidding; the engine
checks them again before it trains or re-runs a unit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from marketplace.protocol.spec import JobSpec, SyntheticSource
from node.data.dedup import window_bytes

from .cost import model_sizes, unit_cost
from .data import DataError

if TYPE_CHECKING:
    from .speed import Speed


class SpecOverLimits(DataError):
    """A job spec that would use more of this machine than its limits allow."""


@dataclass(frozen=True)
class UnitLimits:
    max_parameters: int = 1_000_000_000  # of the model the spec builds
    max_unit_tokens: int = 1 << 32  # tokens one unit trains on: steps x batch x accum x seq_len
    max_source_bytes: int = 4 << 30  # bytes of one data source (downloaded or generated)
    max_threads: int = os.cpu_count() or 1  # CPU threads a unit may ask for
    max_dedup_bytes: int = 2 << 30  # memory of a full dedup window (node.data.dedup)
    # devices one unit may train on: this machine's CUDA devices, else CPU workers (which the
    # thread bound holds: every worker runs the spec's threads at once)
    max_devices: int = torch.cuda.device_count() or 64
    # peak memory of one unit, all its devices together (node.engine.cost): this machine's RAM
    max_memory_bytes: int = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    max_unit_seconds: float = 3600.0  # one unit's estimated time on this machine

    def check(self, spec: JobSpec, devices: int | None = None, speed: Speed | None = None) -> None:
        """Raise SpecOverLimits naming each thing over its limit, for a unit trained on `devices`
        devices (default: the spec's resources.devices); its time is checked when this machine's
        `speed` is given."""
        training = spec.training
        problems = []
        devices = spec.devices if devices is None else devices
        if devices > self.max_devices:
            problems.append(f"{devices} devices (at most {self.max_devices} here)")
        threads = spec.reproducibility.num_threads * devices
        if threads > self.max_threads:
            problems.append(f"{threads} threads (at most {self.max_threads} here)")
        tokens = (
            spec.checkpoint.every
            * training.batch_size
            * training.grad_accum_steps
            * spec.data.seq_len
        )
        if tokens > self.max_unit_tokens:
            problems.append(f"{tokens:,} tokens per unit (at most {self.max_unit_tokens:,})")
        for source in spec.data.sources:
            size = _declared_bytes(source)
            if size is not None and size > self.max_source_bytes:
                problems.append(f"a {size:,}-byte source (at most {self.max_source_bytes:,})")
        dedup = spec.data.dedup
        if dedup is not None and window_bytes(dedup) > self.max_dedup_bytes:
            problems.append(
                f"a dedup window of ~{window_bytes(dedup) >> 20:,} MiB "
                f"(at most {self.max_dedup_bytes >> 20:,})"
            )
        if not problems:  # only a spec within the cheap bounds is built, even on the meta device
            parameters = parameter_count(spec)
            if parameters > self.max_parameters:
                problems.append(
                    f"a model of {parameters:,} parameters (at most {self.max_parameters:,})"
                )
        if not problems:  # and only a model within bounds is traced
            try:
                cost = unit_cost(spec, devices)
            except (RuntimeError, ValueError, TypeError, IndexError) as exc:  # a stranger's model
                raise SpecOverLimits(f"the job's unit cannot be costed here: {exc}") from None
            if cost.memory_bytes > self.max_memory_bytes:
                problems.append(
                    f"~{cost.memory_bytes >> 20:,} MiB of memory per unit "
                    f"(at most {self.max_memory_bytes >> 20:,})"
                )
            seconds = None if speed is None else speed.seconds(cost)
            if seconds is not None and seconds > self.max_unit_seconds:
                problems.append(
                    f"~{seconds:,.0f} s per unit on this machine "
                    f"(at most {self.max_unit_seconds:,.0f})"
                )
        if problems:
            raise SpecOverLimits("the job asks for " + ", ".join(problems))


DEFAULT_LIMITS = UnitLimits()


def checkpoint_bytes(spec: JobSpec) -> int:
    """The most bytes an honest checkpoint of `spec`'s job can take: every tensor of the model's
    state in fp32 (a tied weight once for each of its names, as a unit file stores it) and the
    AdamW moments of every parameter (two fp32 tensors, 8 bytes), plus room for the rest (RNG
    states, metadata, the container). Reading one stops past this, whoever committed it."""
    parameters, weights, _ = model_sizes(spec)
    return 4 * weights + 8 * parameters + (64 << 20)


def parameter_count(spec: JobSpec) -> int:
    """The parameters of the model `spec` builds (shared tensors once), without allocating it."""
    return model_sizes(spec)[0]


def _declared_bytes(source: object) -> int | None:
    """What a source says it holds before it is read; an IPFS or file source is bounded as it is
    read instead (`Storage.cat(max_bytes=...)`, `LocalData.max_bytes`)."""
    return source.num_bytes if isinstance(source, SyntheticSource) else None

"""How much of a machine one unit of a stranger's job spec may use.

A spec is written by whoever pays for the job, so the model it builds, the data it reads and the
threads it asks for are bounded before anything is allocated: the parameter count is taken from
the model built on PyTorch's meta device (shapes only, no memory), the rest from the spec's own
numbers. A provider sets the limits (`node start --max-parameters ...`) and its bidder refuses a
job beyond them before bidding; the engine checks them again before it trains or re-runs a unit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from marketplace.protocol.spec import JobSpec, SyntheticSource
from node.data.dedup import window_bytes

from .data import DataError


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

    def check(self, spec: JobSpec, devices: int | None = None) -> None:
        """Raise SpecOverLimits naming the first thing over its limit, for a unit trained on
        `devices` devices (default: the spec's resources.devices)."""
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
        if problems:
            raise SpecOverLimits("the job asks for " + ", ".join(problems))


DEFAULT_LIMITS = UnitLimits()


def checkpoint_bytes(spec: JobSpec) -> int:
    """The most bytes an honest checkpoint of `spec`'s job can take: every tensor of the model's
    state in fp32 (a tied weight once for each of its names, as a unit file stores it) and the
    AdamW moments of every parameter (two fp32 tensors, 8 bytes), plus room for the rest (RNG
    states, metadata, the container). Reading one stops past this, whoever committed it."""
    parameters, weights = _model_sizes(spec)
    return 4 * weights + 8 * parameters + (64 << 20)


def parameter_count(spec: JobSpec) -> int:
    """The parameters of the model `spec` builds (shared tensors once), without allocating it."""
    return _model_sizes(spec)[0]


def _model_sizes(spec: JobSpec) -> tuple[int, int]:
    """The parameters of the model `spec` builds and the elements of its state's tensors (a tied
    weight once for each of its names), measured on the meta device and remembered per model: a
    bidder asks for every job it sees, and a verifier for every unit."""
    key = (spec.model.model_dump_json(), spec.data.seq_len, spec.vocab_size)
    if key not in _MODEL_SIZES:
        with torch.device("meta"):
            model = spec.build_model()
        if len(_MODEL_SIZES) >= _REMEMBERED_MODELS:  # the oldest goes: strangers write specs
            del _MODEL_SIZES[next(iter(_MODEL_SIZES))]
        parameters = sum(p.numel() for p in model.parameters())
        _MODEL_SIZES[key] = (parameters, sum(t.numel() for t in model.state_dict().values()))
    return _MODEL_SIZES[key]


_REMEMBERED_MODELS = 256
_MODEL_SIZES: dict[tuple[str, int, int], tuple[int, int]] = {}


def _declared_bytes(source: object) -> int | None:
    """What a source says it holds before it is read; an IPFS or file source is bounded as it is
    read instead (`Storage.cat(max_bytes=...)`, `LocalData.max_bytes`)."""
    return source.num_bytes if isinstance(source, SyntheticSource) else None

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

from .data import DataError


class SpecOverLimits(DataError):
    """A job spec that would use more of this machine than its limits allow."""


@dataclass(frozen=True)
class UnitLimits:
    max_parameters: int = 1_000_000_000  # of the model the spec builds
    max_unit_tokens: int = 1 << 32  # tokens one unit trains on: steps x batch x accum x seq_len
    max_source_bytes: int = 4 << 30  # bytes of one data source (downloaded or generated)
    max_threads: int = os.cpu_count() or 1  # CPU threads a unit may ask for

    def check(self, spec: JobSpec) -> None:
        """Raise SpecOverLimits naming the first thing over its limit."""
        training = spec.training
        problems = []
        threads = spec.reproducibility.num_threads
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
    model = _meta_model(spec)
    weights = sum(t.numel() for t in model.state_dict().values())
    return 4 * weights + 8 * _parameters(model) + (64 << 20)


def parameter_count(spec: JobSpec) -> int:
    """The parameters of the model `spec` builds (shared tensors once), without allocating it."""
    return _parameters(_meta_model(spec))


def _meta_model(spec: JobSpec) -> torch.nn.Module:
    """The model `spec` builds, with shapes and no memory."""
    with torch.device("meta"):
        return spec.build_model()


def _parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _declared_bytes(source: object) -> int | None:
    """What a source says it holds before it is read; an IPFS or file source is bounded as it is
    read instead (`Storage.cat(max_bytes=...)`, `LocalData.max_bytes`)."""
    return source.num_bytes if isinstance(source, SyntheticSource) else None

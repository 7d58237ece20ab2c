"""A rank's side of its work units: saving each unit's inputs as it trains, taking them up again,
and what a re-run of a unit gives.

A rank's unit is a DiLoCo round (H local steps, one exchange) or, in ddp, `checkpoint.every`
optimizer steps (an exchange each); what a unit pins and commits is the protocol's rank bundle
(marketplace/protocol/rank_bundle.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NamedTuple, cast

import torch

from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.execution import ExecutionClass
from marketplace.protocol.rank_bundle import RankUnit
from marketplace.protocol.spec import JobSpec
from node.engine.environment import Host, execution_class
from node.engine.limits import parameter_count
from node.engine.train import Trainer

from .compression import ErrorFeedback


def inputs_problem(spec: JobSpec, unit: RankUnit) -> str | None:
    """Why a rank bundle's inputs are not what a rank saves, told before anything is run from
    them (a verifier's re-run, a successor's take-over); None when they are. The error feedback
    residual and outer momentum are each absent or a finite float32 vector over the model's
    parameters (`_vector_problem`)."""
    numel = parameter_count(spec)
    for name, held in (("residual", unit.residual), ("momentum", unit.momentum)):
        problem = None if held is None else _vector_problem(numel, f"the unit's {name}", held)
        if problem is not None:
            return problem
    return None


def residuals_problem(spec: JobSpec, residuals: Sequence[torch.Tensor], count: int) -> str | None:
    """Why the residuals a ddp bundle commits inside its unit are not the `count` finite
    float32 vectors over the model's parameters a rank commits (`GroupConfig.residual_steps`);
    None when they are."""
    if len(residuals) != count:
        return f"the bundle commits {len(residuals)} residuals inside its unit, not {count}"
    numel = parameter_count(spec)
    for number, residual in enumerate(residuals, 1):
        problem = _vector_problem(numel, f"residual {number} of the unit", residual)
        if problem is not None:
            return problem
    return None


def _vector_problem(numel: int, name: str, held: torch.Tensor) -> str | None:
    """Why `held` is not a finite float32 vector over the model's `numel` parameters: a run
    adds it to such a vector, so any other shape is broadcast, and one of (M, 1) makes an
    (M, N) vector that runs the machine out of memory."""
    if held.dtype == torch.float32 and held.shape == (numel,) and bool(held.isfinite().all()):
        return None
    return f"{name} is not a finite float32 vector of {numel} parameters"


def restore(unit: RankUnit, trainer: Trainer, feedback: ErrorFeedback | None) -> None:
    """Put a rank's trainer and error feedback where `unit` starts."""
    trainer.load(unit.trainer)
    if feedback is not None:
        feedback.residual = unit.residual


def save_unit_inputs(
    updates_dir: str | os.PathLike[str],
    rank: int,
    index: int,
    trainer: Trainer,
    feedback: ErrorFeedback | None,
    momentum: torch.Tensor | None = None,
) -> None:
    """Save the inputs of the rank's unit `index`; after its last unit, the trained model."""
    residual = None if feedback is None else feedback.residual
    RankUnit(rank, index, trainer.state(), residual, momentum).save(
        unit_path(updates_dir, index, rank)
    )


def keep_residual(
    updates_dir: str | os.PathLike[str], rank: int, index: int, number: int, residual: torch.Tensor
) -> torch.Tensor:
    """Keep the residual the rank's ddp unit `index` commits after its residual step `number`
    (to bundle it), and go on with it."""
    path = residual_path(updates_dir, index, rank, number)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(residual.clone(), path)
    return residual


def kept_residuals(
    updates_dir: str | os.PathLike[str], index: int, rank: int, count: int
) -> list[torch.Tensor]:
    """The `count` residuals the rank's ddp unit `index` committed inside it, in order."""
    paths = (residual_path(updates_dir, index, rank, number) for number in range(count))
    return [torch.load(path, weights_only=True) for path in paths]


def residual_path(updates_dir: str | os.PathLike[str], index: int, rank: int, number: int) -> Path:
    """Where a rank keeps the residual its ddp unit `index` commits after its residual step
    `number`."""
    return unit_path(updates_dir, index, rank).with_name(f"rank-{rank}-residual-{number:04d}.pt")


def save_segment(
    updates_dir: str | os.PathLike[str],
    rank: int,
    index: int,
    segment: dict[str, Any],
    state: Checkpoint,
) -> None:
    """Keep a segment the rank's round `index` committed to: the state it names, which the
    provider pins for disputes, and beside it the record."""
    path = segment_path(updates_dir, index, rank, int(segment["step"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    state.save(path)
    path.with_suffix(".json").write_text(json.dumps(segment))


def kept_segments(
    updates_dir: str | os.PathLike[str], index: int, rank: int
) -> list[tuple[dict[str, Any], Path]]:
    """The segments the rank's unit `index` committed to, in order: each record and the path
    of the state it names."""
    states = sorted(unit_path(updates_dir, index, rank).parent.glob(f"rank-{rank}-segment-*.pt"))
    return [(json.loads(path.with_suffix(".json").read_text()), path) for path in states]


def segment_path(updates_dir: str | os.PathLike[str], index: int, rank: int, step: int) -> Path:
    """Where a rank keeps the state of the segment of its unit `index` that ends at `step`."""
    return unit_path(updates_dir, index, rank).with_name(f"rank-{rank}-segment-{step:09d}.pt")


class RankUpdate(NamedTuple):
    payload: bytes  # what the rank sent in the unit, its payloads back to back: pinned
    sha256: str  # update_sha256(payload): what the rank commits
    # ddp: the inputs of the rank's next unit, where this one leaves it. None in DiLoCo,
    # whose next round starts from weights the other ranks' payloads make.
    following: RankUnit | None = None
    # DiLoCo: the records of the segments the round committed to (protocol.trace)
    segments: list[dict[str, Any]] | None = None
    # ddp: the residuals the unit commits inside it (GroupConfig.residual_steps)
    residuals: Sequence[torch.Tensor] = ()


def unit_path(updates_dir: str | os.PathLike[str], index: int, rank: int) -> Path:
    """Where a rank saves the inputs of its unit `index`."""
    return Path(updates_dir, f"unit-{index:06d}", f"rank-{rank}.pt")


@contextmanager
def rank_threads() -> Iterator[None]:
    """Ranks train with one thread (bits differ across thread counts); restore the caller's."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def rank_class(spec: JobSpec, threads: int = 1) -> ExecutionClass:
    """The execution class a rank of `spec` trains in here: the CPU with `threads` threads (one,
    as ranks train: `group.rank_trainer`), this process's matmul precision and oneDNN switch."""
    precision = cast(Literal["highest", "high", "medium"], torch.get_float32_matmul_precision())
    host = Host(threads, precision, bool(torch.backends.mkldnn.enabled))
    return execution_class(spec, torch.device("cpu"), host)

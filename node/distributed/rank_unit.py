"""One rank's DiLoCo round as a verifiable unit: its inputs, its update's bytes and their hash.

A rank commits to the sha256 of the payload it sends each round. The payload is a pure
function of the spec, the group's settings and the rank's state at the round's start (the
global weights, its inner optimizer, schedule and data position, its error-feedback
residual), so a verifier holding that state re-runs the round on the CPU and gets the same
bytes, or names the rank that sent something else.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch.nn.utils import parameters_to_vector

from node.engine.spec import JobSpec
from node.engine.train import Trainer

from .compression import ErrorFeedback
from .exchange import encode_update, update_path
from .group import rank_trainer

if TYPE_CHECKING:
    from .diloco import DilocoConfig  # which imports this module

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RankUnit:
    """What one rank's round starts from; with the spec and settings, it fixes the update."""

    rank: int  # the rank, which is also its data shard
    round_: int  # the round, which draws random selections
    trainer: dict[str, Any]  # Trainer.state() at the round's start; its model is the global one
    residual: torch.Tensor | None  # (N,) error feedback carried in; None before the first send
    # (N,) the outer optimizer's momentum, the same on every rank; None without momentum or
    # before the first outer step. Not needed to re-run the round, but to take the rank over.
    momentum: torch.Tensor | None = None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Written whole or not at all: the provider's daemon takes its existence as the
        previous round's end."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        torch.save(
            {
                "rank": self.rank,
                "round": self.round_,
                "trainer": self.trainer,
                "residual": self.residual,
                "momentum": self.momentum,
            },
            partial,
        )
        os.replace(partial, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RankUnit:
        raw = torch.load(path, weights_only=True)
        return cls(raw["rank"], raw["round"], raw["trainer"], raw["residual"], raw["momentum"])


class RankUpdate(NamedTuple):
    payload: bytes  # what the rank sends for the round: pinned as its update
    sha256: str  # update_sha256(payload): what the rank commits


def update_sha256(payload: bytes) -> str:
    """The commitment to a rank's update: the sha256 of its payload bytes, in hex."""
    return hashlib.sha256(payload).hexdigest()


def unit_path(updates_dir: str | os.PathLike[str], round_: int, rank: int) -> Path:
    """Where a rank saves the inputs of its round, beside its update."""
    return update_path(updates_dir, round_, rank).with_suffix(".unit.pt")


def local_round(trainer: Trainer, steps: int) -> tuple[torch.Tensor, list[float]]:
    """`steps` local optimizer steps; the pseudo-gradient (start minus end weights) and losses."""
    params = list(trainer.model.parameters())
    start = parameters_to_vector(params).detach().clone()  # (N,)
    losses = []
    for _ in range(steps):
        loss, _ = trainer.forward_backward()
        trainer.apply(loss)
        losses.append(loss)
    with torch.no_grad():
        return start - parameters_to_vector(params), losses  # (N,)


def run_rank_unit(spec: JobSpec, config: DilocoConfig, unit: RankUnit) -> RankUpdate:
    """Re-run one rank's round from its inputs: the update it should have sent, and its hash."""
    with _rank_threads():
        trainer, _ = rank_trainer(spec, unit.rank)
        trainer.load(unit.trainer)
        delta, _ = local_round(trainer, config.steps_per_round(spec))
        feedback = None
        if config.error_feedback:
            feedback = ErrorFeedback(config.compressor)
            feedback.residual = unit.residual
        payload = encode_update(config.compressor, feedback, delta, unit.round_).to_bytes()
    return RankUpdate(payload, update_sha256(payload))


def verify_rank_unit(spec: JobSpec, config: DilocoConfig, unit: RankUnit, committed: str) -> bool:
    """Whether the rank's committed hash is what its round gives when re-run from its inputs."""
    honest = run_rank_unit(spec, config, unit).sha256 == committed
    if not honest:
        logger.warning(
            "rank %d round %d: committed update does not reproduce", unit.rank, unit.round_
        )
    return honest


@contextmanager
def _rank_threads() -> Iterator[None]:
    """Ranks train with one thread (bits differ across thread counts); restore the caller's."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)

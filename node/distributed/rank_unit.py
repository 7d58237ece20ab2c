"""One rank's work unit as a verifiable record: its inputs, the bytes it sent and their hash.

A rank's unit is a DiLoCo round (H local steps, one exchange) or, in ddp, `checkpoint.every`
optimizer steps (an exchange each). The rank commits to the sha256 of the payloads it sent
in the unit, back to back (their sizes follow from the group's settings). Those payloads
are a pure function of the spec, the group's settings, the rank's state at the unit's start
(the global weights, its optimizer, schedule and data position, its error-feedback
residual) and, in ddp, what the other ranks sent at each step before this one. A verifier
holding those re-runs the unit on the CPU and gets the same bytes, or names the rank that
sent something else.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from node.engine.checkpoint import state_hash
from node.engine.train import Trainer

from .compression import ErrorFeedback


@dataclass(frozen=True)
class RankUnit:
    """What one rank's unit starts from; with the spec and settings, it fixes what it sends."""

    rank: int  # the rank, which is also its data shard
    round_: int  # the unit's index: the DiLoCo round, or the ddp unit of checkpoint.every steps
    trainer: dict[str, Any]  # Trainer.state() at the unit's start; its model is the global one
    residual: torch.Tensor | None  # (N,) error feedback carried in; None before the first send
    # (N,) the outer optimizer's momentum, the same on every rank; None without one (ddp),
    # without momentum, or before the first outer step. Not needed to re-run the unit, but
    # to take the rank over.
    momentum: torch.Tensor | None = None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Written whole or not at all: the provider's daemon takes its existence as the
        previous unit's end."""
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

    def state_hash(self) -> str:
        """The digest of everything the unit starts from (engine/checkpoint.py's format)."""
        return state_hash(
            {
                "rank": self.rank,
                "round": self.round_,
                "trainer": self.trainer,
                "residual": self.residual,
                "momentum": self.momentum,
            }
        )

    def restore(self, trainer: Trainer, feedback: ErrorFeedback | None) -> None:
        """Put a rank's trainer and error feedback where this unit starts."""
        trainer.load(self.trainer)
        if feedback is not None:
            feedback.residual = self.residual

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RankUnit:
        raw = torch.load(path, weights_only=True)
        return cls(raw["rank"], raw["round"], raw["trainer"], raw["residual"], raw["momentum"])


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


class RecordedRound(NamedTuple):
    """One exchange as a rank saw it: who made it up and what each of them sent."""

    members: list[int]
    payloads: list[bytes]  # by member


class RankUpdate(NamedTuple):
    payload: bytes  # what the rank sent in the unit, its payloads back to back: pinned
    sha256: str  # update_sha256(payload): what the rank commits
    # ddp: the inputs of the rank's next unit, where this one leaves it. None in DiLoCo,
    # whose next round starts from weights the other ranks' payloads make.
    following: RankUnit | None = None


def update_sha256(payload: bytes) -> str:
    """The commitment to a rank's unit: the sha256 of its payload bytes, in hex."""
    return hashlib.sha256(payload).hexdigest()


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

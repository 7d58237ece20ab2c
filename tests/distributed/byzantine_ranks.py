"""Byzantine behaviours for tests: what a cheating rank sends instead of its pseudo-gradient."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ScaledRank:
    """Rank `rank` sends its true update times `factor`; the others are honest."""

    rank: int
    factor: float = 100.0

    def __call__(self, rank: int, update: torch.Tensor) -> torch.Tensor:
        return update * self.factor if rank == self.rank else update


@dataclass(frozen=True)
class RandomRank:
    """Rank `rank` sends Gaussian noise `scale` times the norm of its true update."""

    rank: int
    scale: float = 10.0

    def __call__(self, rank: int, update: torch.Tensor) -> torch.Tensor:
        if rank != self.rank:
            return update
        noise = torch.randn(update.shape, generator=torch.Generator().manual_seed(update.numel()))
        return noise / noise.norm() * update.norm() * self.scale


@dataclass(frozen=True)
class NotANumberRank:
    """Rank `rank` sends NaN in every entry: its payload would poison any aggregate."""

    rank: int

    def __call__(self, rank: int, update: torch.Tensor) -> torch.Tensor:
        return torch.full_like(update, float("nan")) if rank == self.rank else update

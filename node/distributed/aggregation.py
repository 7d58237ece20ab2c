"""Combining the ranks' updates: plain mean, or Byzantine-robust clipping and trimming."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch

from marketplace.errors import ZooError

logger = logging.getLogger(__name__)

Method = Literal["mean", "centered_clip", "trimmed_mean", "median"]


class AggregationError(ZooError, ValueError):
    """Aggregation settings that cannot work for the number of ranks given."""


class Aggregate(NamedTuple):
    value: torch.Tensor  # (N,) the combined update
    outliers: tuple[int, ...]  # ranks whose update was clipped or mostly trimmed away


@dataclass(frozen=True)
class Aggregator:
    """How the rows of a (ranks, N) update matrix become one update.

    `centered_clip` (Karimireddy, He and Jaggi, 2021) starts at the coordinate-wise median
    and moves towards each update by at most `tau`, so one rank can pull the result by no
    more than tau / ranks per iteration however large its update. `tau` is
    `clip_multiplier` times the median distance of the updates from that start, because
    the size of honest updates changes over training. `trimmed_mean` drops the `trim`
    largest and smallest values of every coordinate; `median` is the coordinate-wise median.

    `outliers` names the ranks to report to the verifier: for clipping, those cut to less
    than half their distance from the result (honest ranks sit near tau, so being clipped at
    all is no sign); for trimming, those dropped in clearly more coordinates than chance
    would drop an honest one.
    """

    method: Method = "mean"
    trim: int = 1  # values dropped at each end of every coordinate (trimmed_mean)
    clip_multiplier: float = 1.0  # tau in median distances from the start (centered_clip)
    clip_iterations: int = 3  # clipping passes (centered_clip)

    def __post_init__(self) -> None:
        if self.method not in ("mean", "centered_clip", "trimmed_mean", "median"):
            raise AggregationError(
                f"method must be mean, centered_clip, trimmed_mean or median; got {self.method!r}"
            )
        if self.trim < 0:
            raise AggregationError(f"trim must be >= 0; got {self.trim}")
        if self.clip_multiplier <= 0:
            raise AggregationError(f"clip_multiplier must be > 0; got {self.clip_multiplier}")
        if self.clip_iterations < 1:
            raise AggregationError(f"clip_iterations must be >= 1; got {self.clip_iterations}")

    def __call__(self, updates: torch.Tensor) -> Aggregate:
        """Aggregate a (ranks, N) matrix with one update per row."""
        if updates.dim() != 2 or updates.shape[0] < 1:
            raise AggregationError(f"updates must be (ranks, N); got {tuple(updates.shape)}")
        ranks = updates.shape[0]
        if self.method == "mean":
            return Aggregate(updates.mean(dim=0), ())
        if self.method == "centered_clip":
            return self._centered_clip(updates)
        trim = (ranks - 1) // 2 if self.method == "median" else self.trim
        if 2 * trim >= ranks:
            raise AggregationError(f"trim {trim} leaves nothing of {ranks} ranks")
        return _trimmed_mean(updates, trim)

    def _centered_clip(self, updates: torch.Tensor) -> Aggregate:
        center = _trimmed_mean(updates, (updates.shape[0] - 1) // 2).value
        tau = self.clip_multiplier * (updates - center).norm(dim=1).median()
        for _ in range(self.clip_iterations):
            offsets = updates - center  # (ranks, N)
            scale = torch.clamp(tau / offsets.norm(dim=1).clamp_min(1e-12), max=1.0)  # (ranks,)
            center = center + (offsets * scale.unsqueeze(1)).mean(dim=0)
        return Aggregate(center, _ranks((updates - center).norm(dim=1) > 2 * tau))


def _trimmed_mean(updates: torch.Tensor, trim: int) -> Aggregate:
    ranks = updates.shape[0]
    if trim == 0:
        return Aggregate(updates.mean(dim=0), ())
    order = updates.argsort(dim=0)  # (ranks, N): rank indices by value, per coordinate
    kept = updates.gather(0, order[trim : ranks - trim])  # (ranks - 2 trim, N)
    dropped = torch.cat([order[:trim], order[ranks - trim :]])  # (2 trim, N)
    # an honest rank is dropped from a coordinate with probability 2 trim / ranks; flag the
    # ranks dropped in clearly more of them (halfway between chance and always)
    share = torch.bincount(dropped.flatten(), minlength=ranks).float() / updates.shape[1]
    expected = 2 * trim / ranks
    return Aggregate(kept.mean(dim=0), _ranks(share > (1 + expected) / 2))


def _ranks(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in mask.nonzero().flatten())

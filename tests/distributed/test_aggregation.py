"""Aggregation: robust rules stay near the honest mean with one Byzantine rank; the mean does
not."""

from __future__ import annotations

import pytest
import torch

from node.distributed.aggregation import AggregationError, Aggregator

ROBUST = [
    Aggregator("centered_clip"),
    Aggregator("trimmed_mean", trim=1),
    Aggregator("median"),
]


def honest_updates(ranks: int, numel: int = 2000) -> torch.Tensor:
    """Updates that agree on a direction and differ by noise, like pseudo-gradients of shards."""
    g = torch.Generator().manual_seed(ranks)
    direction = torch.randn(numel, generator=g)
    return direction + 0.5 * torch.randn(ranks, numel, generator=g)  # (ranks, numel)


def byzantine(kind: str, update: torch.Tensor) -> torch.Tensor:
    if kind == "scaled":
        return update * 100
    return torch.randn(update.shape, generator=torch.Generator().manual_seed(7)) * 100


def relative_error(value: torch.Tensor, target: torch.Tensor) -> float:
    return float((value - target).norm() / target.norm())


@pytest.mark.parametrize("kind", ["scaled", "random"])
@pytest.mark.parametrize("ranks", [4, 5])
@pytest.mark.parametrize("aggregator", ROBUST, ids=lambda a: a.method)
def test_robust_aggregators_stay_near_the_honest_mean(
    aggregator: Aggregator, ranks: int, kind: str
) -> None:
    updates = honest_updates(ranks)
    honest_mean = updates[1:].mean(dim=0)
    updates[0] = byzantine(kind, updates[0])
    result = aggregator(updates)
    assert relative_error(result.value, honest_mean) < 0.3
    assert result.outliers == (0,)
    assert relative_error(Aggregator("mean")(updates).value, honest_mean) > 10


@pytest.mark.parametrize("aggregator", ROBUST, ids=lambda a: a.method)
def test_without_a_byzantine_rank_robust_aggregators_are_close_to_the_mean(
    aggregator: Aggregator,
) -> None:
    updates = honest_updates(4)
    assert relative_error(aggregator(updates).value, updates.mean(dim=0)) < 0.15


def test_median_is_the_coordinate_wise_median() -> None:
    updates = torch.tensor([[1.0, 9.0], [2.0, 8.0], [3.0, 7.0], [100.0, -50.0]])
    assert torch.equal(Aggregator("median")(updates).value, torch.tensor([2.5, 7.5]))
    odd = updates[:3]
    assert torch.equal(Aggregator("median")(odd).value, torch.tensor([2.0, 8.0]))


def test_mean_is_the_plain_mean_and_names_no_one() -> None:
    updates = torch.randn(3, 10)
    result = Aggregator("mean")(updates)
    assert torch.equal(result.value, updates.mean(dim=0))
    assert result.outliers == ()


def test_centered_clip_bounds_the_pull_of_one_rank() -> None:
    updates = torch.zeros(4, 3)
    updates[1:, 0] = torch.tensor([1.0, 1.1, 0.9])
    updates[0] = torch.tensor([0.0, 1e6, 0.0])
    value = Aggregator("centered_clip", clip_iterations=1)(updates).value
    assert abs(float(value[1])) < 1.0


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"method": "vote"}, "method"),
        ({"trim": -1}, "trim"),
        ({"clip_multiplier": 0}, "clip_multiplier"),
        ({"clip_iterations": 0}, "clip_iterations"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(AggregationError, match=field):
        Aggregator(**kwargs)


def test_trimming_everything_is_refused() -> None:
    with pytest.raises(AggregationError, match="trim"):
        Aggregator("trimmed_mean", trim=2)(torch.randn(4, 10))

"""DiLoCo across local gloo ranks: loss falls, and robust aggregation shrugs off a cheating rank."""

from __future__ import annotations

import pytest
from byzantine_ranks import NotANumberRank, RandomRank, ScaledRank
from tiny_job import tiny_spec

from node.distributed.aggregation import Aggregator
from node.distributed.compression import Compressor
from node.distributed.diloco import DilocoConfig, train_diloco
from node.distributed.group import DistributedConfigError, DistributedResult
from node.engine import JobSpec, parse_spec

ROUNDS, H = 6, 10


@pytest.fixture(scope="module")
def spec() -> JobSpec:
    return tiny_spec(ROUNDS * H, H)


@pytest.fixture(scope="module")
def honest(spec: JobSpec) -> DistributedResult:
    return train_diloco(spec, DilocoConfig(ranks=4))


@pytest.mark.slow
def test_three_ranks_with_compression_lower_the_loss(spec: JobSpec) -> None:
    compressor = Compressor(ratio=0.05, bits=8)
    result = train_diloco(spec, DilocoConfig(ranks=3, compressor=compressor))
    assert len(result.eval_losses) == ROUNDS
    assert result.eval_loss < 0.6 * result.eval_losses[0]
    assert result.train_losses[-1] < result.train_losses[0]
    assert result.bytes_sent == [ROUNDS * compressor.payload_bytes(result.parameters)] * 3
    assert result.bytes_sent[0] < ROUNDS * H * 4 * result.parameters / 100  # vs fp32 per step
    assert all(len(digests) == ROUNDS for digests in result.commitments)
    assert len({digests[-1] for digests in result.commitments}) == 3
    assert result.outliers == [[]] * ROUNDS


@pytest.mark.slow
@pytest.mark.parametrize(
    "aggregator, cheat",
    [(Aggregator("centered_clip"), ScaledRank(1)), (Aggregator("trimmed_mean"), RandomRank(1))],
    ids=["centered_clip-scaled", "trimmed_mean-random"],
)
def test_robust_aggregation_keeps_a_byzantine_run_within_two_percent(
    spec: JobSpec, honest: DistributedResult, aggregator: Aggregator, cheat: object
) -> None:
    attacked = train_diloco(spec, DilocoConfig(ranks=4, aggregator=aggregator), tamper=cheat)
    assert attacked.eval_loss <= 1.02 * honest.eval_loss
    assert attacked.outliers == [[1]] * ROUNDS


@pytest.mark.slow
def test_plain_mean_is_visibly_damaged_by_a_byzantine_rank(
    spec: JobSpec, honest: DistributedResult
) -> None:
    attacked = train_diloco(spec, DilocoConfig(ranks=4), tamper=ScaledRank(1))
    assert not attacked.eval_loss <= 1.5 * honest.eval_loss  # also true when it is nan
    assert honest.eval_loss < 0.6 * honest.eval_losses[0]


@pytest.mark.slow
@pytest.mark.parametrize("bits", [32, 8])
def test_a_rank_sending_nan_is_refused_and_reported_while_the_group_trains_on(
    spec: JobSpec, honest: DistributedResult, bits: int
) -> None:
    """Even the plain mean, which any finite cheat moves, never sees a payload that is not
    finite: the other ranks leave it out of every round and report its rank."""
    config = DilocoConfig(ranks=4, compressor=Compressor(bits=bits))
    attacked = train_diloco(spec, config, tamper=NotANumberRank(1))
    assert attacked.outliers == [[1]] * ROUNDS
    assert attacked.members == [[0, 2, 3]] * ROUNDS
    assert attacked.eval_loss < 0.6 * attacked.eval_losses[0]
    assert attacked.eval_loss <= 1.1 * honest.eval_loss
    assert len(set(attacked.weights_sha256[:1] + attacked.weights_sha256[2:])) == 1


def test_rounds_must_divide_the_schedule(spec: JobSpec) -> None:
    raw = spec.model_dump(mode="json")
    raw["training"]["max_steps"] = ROUNDS * H + 1
    with pytest.raises(DistributedConfigError, match="max_steps"):
        train_diloco(parse_spec(raw), DilocoConfig(ranks=2))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"ranks": 0}, "ranks"),
        ({"outer_lr": 0}, "outer_lr"),
        ({"outer_momentum": 1}, "momentum"),
        ({"inner_steps": 0}, "inner_steps"),
        ({"quorum": 3, "deadline_s": 1}, "quorum"),
        ({"quorum": 1}, "quorum needs deadline_s"),
        ({"deadline_s": 0}, "deadline_s"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(DistributedConfigError, match=field):
        DilocoConfig(**{"ranks": 2, **kwargs})

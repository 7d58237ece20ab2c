"""Per-rank verifiable units: a re-run of one rank's unit reproduces its commitment bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from byzantine_ranks import ScaledRank
from tiny_job import tiny_spec

from marketplace.protocol import trace
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.rank_bundle import RankUnit, update_sha256
from node.distributed.aggregation import Aggregator
from node.distributed.compression import Compressor
from node.distributed.ddp import train_ddp
from node.distributed.diloco import DilocoConfig, following_round, train_diloco
from node.distributed.exchange import ReplayMismatch, recorded_round, sent_in, update_path
from node.distributed.group import GroupConfig
from node.distributed.job import first_unit, run_rank_unit
from node.distributed.rank_unit import kept_segments, unit_path

UNITS, STEPS = 3, 5
COMPRESSION = {"compressor": Compressor(ratio=0.1, bits=4, selection="random")}


@pytest.mark.slow
def test_a_verifier_reproduces_honest_diloco_ranks_and_names_the_cheater(tmp_path: Path) -> None:
    spec = tiny_spec(UNITS * STEPS, STEPS)
    config = DilocoConfig(
        3, aggregator=Aggregator("centered_clip"), updates_dir=str(tmp_path), **COMPRESSION
    )
    result = train_diloco(spec, config, tamper=ScaledRank(1, factor=1.5))
    round_ = 1  # past the first round: a residual and the group's weights come in
    verdicts = {}
    for rank in range(3):
        unit = RankUnit.load(unit_path(tmp_path, round_, rank))
        committed = result.commitments[rank][round_]
        saved = update_path(tmp_path, round_, rank).read_bytes()
        assert update_sha256(saved) == committed
        rerun = run_rank_unit(spec, config, unit)
        verdicts[rank] = rerun.sha256 == committed
        if rank == 2:
            assert rerun.payload == saved
        first = RankUnit.load(unit_path(tmp_path, 0, rank))
        assert first.state_hash() == first_unit(spec, rank).state_hash()  # the seed
    assert verdicts == {0: True, 1: False, 2: True}
    # A round's start, rebuilt from the round before (its end, its exchange, the outer step
    # with Nesterov momentum): to the bit for the honest ranks. The cheater's residual is not
    # what its committed end leaves, since it sent another update than its steps made.
    for round_ in (0, 1):
        for rank in range(3):
            record, path = kept_segments(tmp_path, round_, rank)[-1]
            end = Checkpoint.load(path).state
            after = end | {"trace": [*end["trace"], trace.leaf(record)]}
            unit = RankUnit.load(unit_path(tmp_path, round_, rank))
            exchanged = recorded_round(tmp_path, round_)
            sent = update_path(tmp_path, round_, rank).read_bytes()
            rebuilt = following_round(spec, config, unit, after, sent, exchanged)
            saved = RankUnit.load(unit_path(tmp_path, round_ + 1, rank))
            assert (rebuilt.state_hash() == saved.state_hash()) is (rank != 1)
            assert rebuilt.trainer["model"].keys() == saved.trainer["model"].keys()
            assert all(
                torch.equal(rebuilt.trainer["model"][k], v)
                for k, v in saved.trainer["model"].items()
            )
            assert round_ == 0 or torch.equal(rebuilt.momentum, saved.momentum)


@pytest.mark.slow
def test_a_ddp_unit_is_re_run_step_by_step_from_the_rounds_it_recorded(tmp_path: Path) -> None:
    spec = tiny_spec(UNITS * STEPS, STEPS)
    config = GroupConfig(
        3, aggregator=Aggregator("centered_clip"), updates_dir=str(tmp_path), **COMPRESSION
    )
    result = train_ddp(spec, config, tamper=ScaledRank(1, factor=1.5))
    index = 1  # past the first unit: a residual and trained weights come in
    rounds = config.unit_rounds(spec, index)
    assert list(rounds) == [5, 6, 7, 8, 9]
    recorded = [recorded_round(tmp_path, r) for r in rounds]
    assert all(members == [0, 1, 2] for members, *_ in recorded)
    for rank in (0, 2):
        sent = sent_in(tmp_path, rounds, rank)
        # the unit's payload is its steps' payloads back to back, each the one committed
        assert [update_sha256(r.payloads[rank]) for r in recorded] == result.commitments[rank][5:10]
        rerun = run_rank_unit(
            spec, config, RankUnit.load(unit_path(tmp_path, index, rank)), recorded
        )
        assert rerun.payload == sent
        # and it ends where the rank's next unit starts, bit for bit, as unit 0 starts from the seed
        following = RankUnit.load(unit_path(tmp_path, index + 1, rank))
        assert rerun.following.state_hash() == following.state_hash()
        assert (
            first_unit(spec, rank).state_hash()
            == RankUnit.load(unit_path(tmp_path, 0, rank)).state_hash()
        )
    # The scaled rank's recorded payloads are not what its unit gives: named at its first step.
    with pytest.raises(ReplayMismatch, match="round 5 records another payload from rank 1"):
        run_rank_unit(spec, config, RankUnit.load(unit_path(tmp_path, index, 1)), recorded)
    with pytest.raises(ValueError, match="rounds it took part in"):
        run_rank_unit(spec, config, RankUnit.load(unit_path(tmp_path, index, 0)))

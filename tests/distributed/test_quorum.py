"""Stragglers: a round closes at its deadline with a quorum, and a late rank catches up."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
import torch.distributed as dist
from tiny_job import tiny_spec

from node.distributed.diloco import DilocoConfig, train_diloco
from node.distributed.group import free_port
from node.distributed.quorum import QuorumTimeout, RoundBoard

ROUNDS, H = 4, 5
DEADLINE_S = 2.0


@dataclass(frozen=True)
class LateOnce:
    """Rank `rank` sends its update of round `round_` `seconds` late; on time otherwise."""

    rank: int
    round_: int
    seconds: float

    def __call__(self, rank: int, round_: int) -> float:
        return self.seconds if (rank, round_) == (self.rank, self.round_) else 0.0


@pytest.fixture
def store() -> dist.TCPStore:
    return dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=5))


def test_a_round_closes_with_the_quorum_and_a_late_rank_reads_the_same_members(store) -> None:
    board = RoundBoard(store, ranks=3, quorum=2, deadline_s=0.05)
    board.post(0, 0, b"a")
    board.post(0, 1, b"b")
    assert board.members(0) == [0, 1]
    board.post(0, 2, b"late")
    assert board.members(0) == [0, 1]
    assert board.payloads(0, [0, 1]) == [b"a", b"b"]


def test_a_round_closes_at_once_when_every_rank_posted(store) -> None:
    board = RoundBoard(store, ranks=2, quorum=1, deadline_s=3600)
    board.post(5, 1, b"b")
    board.post(5, 0, b"a")
    assert board.members(5) == [0, 1]


def test_without_a_quorum_the_round_gives_up(store) -> None:
    board = RoundBoard(store, ranks=3, quorum=2, deadline_s=0.01, give_up_s=0.1)
    board.post(0, 0, b"a")
    with pytest.raises(QuorumTimeout, match="1 of 3 updates"):
        board.members(0)


@pytest.mark.slow
def test_a_straggler_misses_one_round_and_rejoins_on_the_group_weights() -> None:
    spec = tiny_spec(ROUNDS * H, H)
    config = DilocoConfig(ranks=3, quorum=2, deadline_s=DEADLINE_S)
    late = LateOnce(rank=2, round_=1, seconds=1.5 * DEADLINE_S)
    result = train_diloco(spec, config, delay=late)
    assert result.members == [[0, 1, 2], [0, 1], [0, 1, 2], [0, 1, 2]]
    assert len(set(result.weights_sha256)) == 1  # the straggler holds the group's weights
    assert result.eval_loss < result.eval_losses[0]
    assert all(len(digests) == ROUNDS for digests in result.commitments)

"""Stragglers: a round closes at its deadline with a quorum, a late rank catches up, and a rank
that dropped out is taken over from its last unit (a DiLoCo round, or ddp steps)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist
from tiny_job import tiny_spec

from marketplace.processes import free_port
from marketplace.protocol.rank_bundle import RankUnit
from marketplace.protocol.spec import JobSpec
from node.distributed.diloco import DilocoConfig, train_diloco
from node.distributed.exchange import recorded_round, sent_in, settle_round
from node.distributed.group import GroupConfig
from node.distributed.job import run_rank
from node.distributed.quorum import PART_BYTES, QuorumTimeout, RoundBoard
from node.distributed.rank_unit import unit_path

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
    assert board.payloads(0, [0, 1], max_bytes=1) == [b"a", b"b"]


def test_a_payload_past_what_the_store_takes_in_one_value_goes_up_in_parts(store) -> None:
    """torch's TCPStore refuses a value over 8 MiB; a large model's update is bigger."""
    board = RoundBoard(store, ranks=2, quorum=2, deadline_s=1.0)
    large = bytes(range(256)) * (9 * 2**20 // 256 + 1)
    board.post(0, 0, large)
    board.post(0, 1, b"small")
    assert board.members(0) == [0, 1]
    assert board.payloads(0, [0, 1], max_bytes=len(large)) == [large, b"small"]


@pytest.mark.parametrize(
    "count",
    [b"1000000", b"2", b"0", b"-1", b"x", b"9" * 40],
    ids=["past-the-bound", "a-part-missing", "none", "negative", "not-a-number", "huge"],
)
def test_a_post_that_could_not_be_a_payload_reads_as_nothing(store, count) -> None:
    """Another member writes rank 1's post: a count of parts past what a payload of the round
    can have, or naming a part that is not up, reads as b"" at once (refused as unsigned),
    rather than reading without bound or waiting minutes on a key."""
    board = RoundBoard(store, ranks=2, quorum=2, deadline_s=1.0)
    board.post(0, 0, b"a" * 100)
    board.post(0, 1, b"b")
    store.set("rounds/0/1", count)
    with _within(2.0):
        assert board.payloads(0, [0, 1], max_bytes=5 * 2**20) == [b"a" * 100, b""]


def test_a_round_every_slot_committed_is_taken_off_the_board_and_the_next_stays(store) -> None:
    board = RoundBoard(store, ranks=3, quorum=2, deadline_s=0.0)
    big = os.urandom(2 * PART_BYTES + 1)  # three parts
    for round_ in (1, 2):
        board.post(round_, 0, big)
        board.post(round_, 2, b"two")
        assert board.members(round_) == [0, 2]
    store.set("rounds/1/1", "9999999")  # a count a member planted, one part behind it
    store.set("rounds/1/1/0", b"planted")
    held = store.num_keys()

    board.forget(1)

    # rank 0's three parts and count, rank 2's part and count, the planted ones, the members
    assert held - store.num_keys() == 4 + 2 + 2 + 1
    gone = ("0", "0/0", "0/2", "2", "2/0", "1", "1/0", "members")
    assert not any(store.check([f"rounds/1/{key}"]) for key in gone)
    assert board.payloads(2, [0, 2], len(big)) == [big, b"two"]
    board.forget(1)  # again: nothing left to take
    assert board.payloads(2, [0, 2], len(big)) == [big, b"two"]


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


@contextmanager
def _within(seconds: float) -> Iterator[None]:
    """Fails the test where the block runs past `seconds`, however it waits."""

    def late(*_: object) -> None:
        pytest.fail(f"still waiting after {seconds} s")

    before = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


@pytest.mark.parametrize(
    "planted",
    [
        b"[0, 0, 0, 2]",  # not distinct: the rank's committed record would be refused
        b"[]",  # nothing to aggregate
        b"[3]",  # below the quorum: the member's update alone
        b"[0, 1, 3]",  # a rank that never posted: reading its payload waits for minutes
        b"[0, 1, 9]",
        b"[2, 1, 0]",  # not in the order ranks write them
        b"[false, true, 2]",
        b'["0", "1"]',
        b"[0.0, 1.0]",
        b'{"0": 1}',
        pytest.param(b"[" * 100_000, id="nested-too-deep"),
        b"not json",
        b"\xff",
    ],
)
def test_members_a_member_wrote_out_of_turn_do_not_close_the_round(store, planted) -> None:
    """Rank 3 writes the round's members before anyone posts; ranks 0-2 close it on their own
    view at the deadline, with members a round could have."""
    store.set("rounds/0/members", planted)
    boards = [RoundBoard(store, ranks=4, quorum=2, deadline_s=0.1) for _ in range(3)]
    for rank, board in enumerate(boards):
        board.post(0, rank, bytes([rank]))
    for board in boards:
        with _within(2.0):
            members = board.members(0)
        assert members == sorted(set(members)) and all(type(m) is int for m in members)
        assert 2 <= len(members) and set(members) <= {0, 1, 2}


@pytest.mark.parametrize("opened", [b"nan", b"inf", b"-inf", b"0", b"1e12", b"x"])
def test_a_planted_opening_time_moves_neither_the_deadline_nor_the_give_up(store, opened) -> None:
    """A member writes when the round opened (or runs a fast clock): each rank still closes the
    round at the deadline after it posted, or gives up at `give_up_s`, neither before nor never."""
    board = RoundBoard(store, ranks=3, quorum=2, deadline_s=0.2, give_up_s=0.5)
    for round_ in (0, 1):
        store.set(f"rounds/{round_}/opened", opened)
    start = time.monotonic()
    board.post(0, 0, b"a")
    board.post(0, 1, b"b")
    with _within(2.0):
        assert board.members(0) == [0, 1]
    assert time.monotonic() - start >= 0.2

    start = time.monotonic()
    board.post(1, 0, b"a")
    with _within(2.0), pytest.raises(QuorumTimeout, match="1 of 3 updates"):
        board.members(1)
    assert time.monotonic() - start >= 0.5


@pytest.mark.slow
def test_a_straggler_misses_one_round_and_rejoins_on_the_group_weights() -> None:
    spec = tiny_spec(ROUNDS * H, H)
    # a rank is on time within 4 s of the others: on a loaded machine one started 2 s after them
    deadline = 2 * DEADLINE_S
    config = DilocoConfig(ranks=3, quorum=2, deadline_s=deadline)
    late = LateOnce(rank=2, round_=1, seconds=1.5 * deadline)
    result = train_diloco(spec, config, delay=late)
    assert result.members == [[0, 1, 2], [0, 1], [0, 1, 2], [0, 1, 2]]
    assert len(set(result.weights_sha256)) == 1  # the straggler holds the group's weights
    assert result.eval_loss < result.eval_losses[0]
    assert all(len(digests) == ROUNDS for digests in result.commitments)


@dataclass(frozen=True)
class RankStarter:
    """Starts a rank of a 3-rank group with a quorum of 2, in a process of its own."""

    spec: JobSpec
    strategy: type[GroupConfig]
    port: int
    deadline_s: float = DEADLINE_S

    def __call__(
        self,
        rank: int,
        folder: Path,
        unit: RankUnit | None = None,
        keep_board: bool = False,
        delay: LateOnce | None = None,
    ) -> multiprocessing.Process:
        config = self.strategy(3, quorum=2, deadline_s=self.deadline_s, updates_dir=str(folder))
        report = str(folder / "report.json")
        process = multiprocessing.get_context("spawn").Process(
            target=run_rank,
            args=(self.spec, config, rank, "127.0.0.1", self.port, report, None, unit),
            kwargs={"keep_board": keep_board, "delay": delay},
        )
        process.start()
        return process


@pytest.mark.slow
@pytest.mark.parametrize(("strategy", "steps"), [(DilocoConfig, 20), (GroupConfig, 4)])
def test_a_rank_killed_mid_job_is_taken_over_from_its_last_unit(
    tmp_path: Path, strategy: type[GroupConfig], steps: int
) -> None:
    units = 5
    spec = tiny_spec(units * steps, steps)
    start = RankStarter(spec, strategy, free_port())

    first = [start(rank, tmp_path / str(rank)) for rank in range(3)]
    # Rank 1's machine vanishes as its unit 2 begins, after it sent unit 1.
    while not unit_path(tmp_path / "1", 2, 1).exists():
        assert first[1].is_alive()
        time.sleep(0.005)
    os.kill(first[1].pid, signal.SIGKILL)
    first[1].join()
    # Another process takes rank 1 over from the inputs of its last unit sent.
    taken_over = start(1, tmp_path / "1-again", RankUnit.load(unit_path(tmp_path / "1", 1, 1)))
    for process in (first[0], first[2], taken_over):
        process.join(timeout=120)
        assert process.exitcode == 0

    reports = [
        json.loads((tmp_path / name / "report.json").read_text()) for name in ("0", "1-again", "2")
    ]
    assert len({report["weights_sha256"] for report in reports}) == 1  # one group model
    # Re-run from its inputs, unit 1 sends the bytes the first process sent (and committed to).
    rounds = strategy(3).unit_rounds(spec, 1)
    assert sent_in(tmp_path / "1-again", rounds, 1) == sent_in(tmp_path / "1", rounds, 1)
    exchanges = units * len(rounds)
    assert len(reports[1]["commitments"]) == exchanges - rounds.start  # from unit 1 on
    members = reports[0]["members"]
    assert members[:2] == [[0, 1, 2], [0, 1, 2]]
    assert [0, 2] in members[2:]  # the group went on without rank 1 meanwhile


@pytest.mark.slow
def test_a_rank_done_training_but_never_committed_is_re_run_after_the_group_finished(
    tmp_path: Path,
) -> None:
    """A provider's machine may drop after its rank trained every unit but before it committed
    them: the rank counted itself out of the board, and its successor re-runs the units later.
    A market's rank 0 (`keep_board`) keeps the board for it until its process is stopped."""
    spec = tiny_spec(ROUNDS * H, H)
    start = RankStarter(spec, DilocoConfig, free_port())
    host = start(0, tmp_path / "0", keep_board=True)
    try:
        others = [start(rank, tmp_path / str(rank)) for rank in (1, 2)]
        for process in others:
            process.join(timeout=120)
            assert process.exitcode == 0
        time.sleep(1.0)
        assert host.is_alive(), "every rank counted itself out, and rank 0 still keeps the board"

        # Only rank 1's first unit reached the chain: its successor re-runs the rest.
        successor = start(1, tmp_path / "1-again", RankUnit.load(unit_path(tmp_path / "1", 1, 1)))
        successor.join(timeout=120)
        assert successor.exitcode == 0
    finally:
        host.terminate()
        host.join()

    reports = [
        json.loads((tmp_path / name / "report.json").read_text()) for name in ("0", "1-again", "2")
    ]
    assert len({report["weights_sha256"] for report in reports}) == 1  # one group model
    rounds = range(1, ROUNDS)  # a DiLoCo unit is one round
    assert sent_in(tmp_path / "1-again", rounds, 1) == sent_in(tmp_path / "1", rounds, 1)


def _wait_for(path: Path, process: multiprocessing.Process, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.is_alive(), f"the rank ended before {path.name}"
        assert time.monotonic() < deadline, f"no {path.name} after {timeout:.0f}s"
        time.sleep(0.005)


@pytest.mark.slow
def test_a_group_whose_host_dropped_meets_again_and_goes_through_its_settled_rounds(
    tmp_path: Path,
) -> None:
    """Round 0 closes without rank 2, which was late; then rank 0's machine vanishes, and
    the board its process hosted with it. The group meets again on a new board, each rank from
    its first unit (as from the last one its provider committed), with round 0 written down from
    a committed record: it is gone through as it was, so every rank starts its next unit bit
    for bit where it did before, and the group trains one model from there. On the new board
    alone round 0 would close with all three and the ranks would go on from another state than
    the one their committed units record."""
    spec = tiny_spec(ROUNDS * H, H)
    first, again = tmp_path / "first", tmp_path / "again"
    start = RankStarter(spec, DilocoConfig, free_port())
    late = LateOnce(rank=2, round_=0, seconds=3 * DEADLINE_S)
    host = start(0, first / "0", keep_board=True)
    others = [start(1, first / "1"), start(2, first / "2", delay=late)]
    _wait_for(unit_path(first / "0", 1, 0), host)  # round 0 closed, with ranks 0 and 1
    os.kill(host.pid, signal.SIGKILL)
    host.join()
    others[0].join(timeout=60)  # rank 1 met the board in round 0
    assert others[0].exitcode not in (0, None), "the board went with its host"
    others[1].kill()  # rank 2, late, may still be trying to reach it
    others[1].join()
    settled = recorded_round(first / "0", 0)
    assert settled.members == [0, 1]

    # on time now: a rank that starts seconds after the others on a loaded machine is not late
    restart = RankStarter(spec, DilocoConfig, free_port(), deadline_s=4 * DEADLINE_S)
    processes = []
    for rank in range(3):
        settle_round(again / str(rank), 0, settled)
        processes.append(restart(rank, again / str(rank), keep_board=rank == 0))
    try:
        for process in processes[1:]:
            process.join(timeout=120)
            assert process.exitcode == 0
    finally:
        processes[0].terminate()
        processes[0].join()

    assert all(recorded_round(again / str(rank), 0) == settled for rank in range(3))
    for rank in (0, 1):
        before = unit_path(first / str(rank), 1, rank)
        if before.exists():  # rank 1 may have gone before it saved it
            after = RankUnit.load(unit_path(again / str(rank), 1, rank))
            assert after.state_hash() == RankUnit.load(before).state_hash()
    reports = [json.loads((again / str(rank) / "report.json").read_text()) for rank in range(3)]
    assert len({report["weights_sha256"] for report in reports}) == 1  # one group model
    assert reports[1]["members"] == [[0, 1], [0, 1, 2], [0, 1, 2], [0, 1, 2]]


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1], ids=["the-host", "a-rank-whose-host-is-gone"])
def test_a_rank_taken_over_after_its_group_finished_goes_through_the_settled_rounds_alone(
    tmp_path: Path, rank: int
) -> None:
    """A rank's machine may drop after the whole group trained every round but before its
    provider committed more than the rank's first unit, and the host's with it. The others are
    done and gone; the rank's successor re-runs its first unit and goes through the later
    rounds as the others' committed records hold them, to the group's model: a successor host
    hosts a board no other rank will join, another rank needs no board at all."""
    spec = tiny_spec(ROUNDS * H, H)
    first, again = tmp_path / "first", tmp_path / "again"
    start = RankStarter(spec, DilocoConfig, free_port())
    host = start(0, first / "0", keep_board=True)
    others = [start(other, first / str(other)) for other in (1, 2)]
    for process in others:
        process.join(timeout=120)
        assert process.exitcode == 0
    os.kill(host.pid, signal.SIGKILL)
    host.join()

    for round_ in range(1, ROUNDS):  # a DiLoCo unit is one round
        settle_round(again, round_, recorded_round(first / "2", round_))
    meeting = RankStarter(spec, DilocoConfig, free_port() if rank == 0 else start.port)
    successor = meeting(rank, again, RankUnit.load(unit_path(first / str(rank), 1, rank)))
    try:
        _wait_for(again / "report.json", successor, timeout=60)
    finally:
        successor.terminate()
        successor.join()

    trained = [json.loads((folder / "report.json").read_text()) for folder in (again, first / "2")]
    assert trained[0]["weights_sha256"] == trained[1]["weights_sha256"]  # the group's model
    rounds = range(1, ROUNDS)
    assert sent_in(again, rounds, rank) == sent_in(first / str(rank), rounds, rank)

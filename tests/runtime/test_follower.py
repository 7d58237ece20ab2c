"""The event cursor and the follower on a real chain: a handler that fails mid-batch journals
nothing and gets the same events again, a restart resumes after what was journaled, and a block the
chain dropped is reported and read again from where the chain still agrees."""

from __future__ import annotations

import logging

import pytest

from marketplace.chain.events import ChainReorganized, EventCursor
from marketplace.devnet.accounts import devnet_account
from marketplace.runtime.follower import ATTEMPTS, EventFollower
from marketplace.runtime.journal import JournalDB

pytestmark = pytest.mark.anvil

GOVERNOR, USER = devnet_account(0), devnet_account(1)


class Seen(JournalDB):
    """A role whose state is the ZEN transfers it was handed. A plain INSERT: handing it the same
    event twice fails."""

    ROLE_SCHEMA = """CREATE TABLE IF NOT EXISTS seen (
        tx TEXT, log_index INTEGER, amount INTEGER, PRIMARY KEY (tx, log_index));"""

    def see(self, event) -> None:
        self._run(
            "INSERT INTO seen VALUES (?, ?, ?)",
            event["transactionHash"].hex(),
            event["logIndex"],
            event["args"]["value"],
        )

    def amounts(self) -> list[int]:
        return [row[0] for row in self._run("SELECT amount FROM seen ORDER BY rowid")]


def snapshot(w3) -> str:
    return w3.provider.make_request("evm_snapshot", [])["result"]


def revert(w3, snapshot_id: str) -> None:
    w3.provider.make_request("evm_revert", [snapshot_id])


def test_a_failed_handler_journals_nothing_and_the_events_come_again(w3, ledger, tmp_path):
    start = w3.eth.block_number + 1
    for amount in (1, 2, 3):
        ledger.transfer(GOVERNOR, USER.address, amount)
    journal = Seen(tmp_path / "journal.sqlite3")

    def fails_on_the_second(event):
        journal.see(event)
        if event["args"]["value"] == 2:
            raise ConnectionError("IPFS node down")

    follower = EventFollower(w3, [ledger.zen], journal, fails_on_the_second, start_block=start)
    with pytest.raises(ConnectionError):
        follower.follow()
    assert journal.amounts() == []
    assert journal.cursor(start) == (start, None)
    assert follower.cursor.position == (start, None)

    follower.handle = journal.see
    assert follower.follow() == 3
    assert journal.amounts() == [1, 2, 3]
    assert journal.cursor(start) == follower.cursor.position

    ledger.transfer(GOVERNOR, USER.address, 4)
    restarted = EventFollower(w3, [ledger.zen], journal, journal.see, start_block=start)
    assert restarted.cursor.position == follower.cursor.position
    assert restarted.follow() == 1
    assert journal.amounts() == [1, 2, 3, 4]


def test_an_event_that_breaks_its_handler_is_quarantined_and_the_rest_handled(
    w3, ledger, tmp_path, caplog
):
    start = w3.eth.block_number + 1
    for amount in (1, 2, 3):
        ledger.transfer(GOVERNOR, USER.address, amount)
    journal = Seen(tmp_path / "journal.sqlite3")

    def chokes_on_the_second(event):
        journal.see(event)  # undone with the event: the quarantined event leaves no record
        if event["args"]["value"] == 2:
            raise TypeError("'<' not supported between instances of 'str' and 'int'")

    follower = EventFollower(w3, [ledger.zen], journal, chokes_on_the_second, start_block=start)
    with caplog.at_level(logging.ERROR):
        assert follower.follow() == 3
    assert journal.amounts() == [1, 3]
    [(block, _, _, name, error)] = journal.quarantined()
    assert name == "Transfer" and error.startswith("TypeError")
    assert f"Transfer in block {block}" in caplog.text and "quarantined" in caplog.text

    restarted = EventFollower(w3, [ledger.zen], journal, chokes_on_the_second, start_block=start)
    assert restarted.follow() == 0  # the cursor is past it: it is not handled again
    assert len(journal.quarantined()) == 1


def test_a_transient_failure_is_retried_and_quarantined_only_when_it_keeps_coming(
    w3, ledger, tmp_path
):
    start = w3.eth.block_number + 1
    for amount in (1, 2):
        ledger.transfer(GOVERNOR, USER.address, amount)
    journal = Seen(tmp_path / "journal.sqlite3")
    calls = []

    def node_down_for_two(event):
        calls.append(event["args"]["value"])
        if event["args"]["value"] == 2:
            raise ConnectionError("IPFS node down")
        journal.see(event)

    follower = EventFollower(w3, [ledger.zen], journal, node_down_for_two, start_block=start)
    for _ in range(ATTEMPTS - 1):
        with pytest.raises(ConnectionError):
            follower.follow()
        assert journal.amounts() == [] and journal.quarantined() == []
    assert follower.follow() == 2  # the last attempt: the event goes to quarantine
    assert journal.amounts() == [1]
    assert calls.count(2) == ATTEMPTS
    assert journal.quarantined()[0][4] == "ConnectionError: IPFS node down"


def test_the_cursor_reports_a_block_the_chain_replaced_or_dropped(w3, ledger):
    cursor = EventCursor(w3, [ledger.zen], w3.eth.block_number + 1)
    ledger.transfer(GOVERNOR, USER.address, 1)
    assert [e["args"]["value"] for e in cursor.poll()] == [1]
    kept = cursor.last
    before = snapshot(w3)
    ledger.transfer(GOVERNOR, USER.address, 2)
    assert [e["args"]["value"] for e in cursor.poll()] == [2]
    read = cursor.last
    assert read.number == kept.number + 1 and read.hash == cursor.hash_of(read.number)

    revert(w3, before)
    with pytest.raises(ChainReorganized) as dropped:
        cursor.poll()
    assert (dropped.value.block, dropped.value.found) == (read, None)

    ledger.transfer(GOVERNOR, USER.address, 3)  # another block of the same number
    with pytest.raises(ChainReorganized) as replaced:
        cursor.poll()
    assert replaced.value.block == read
    assert replaced.value.found == cursor.hash_of(read.number) != read.hash
    assert cursor.position == (read.number + 1, read)  # nothing was read
    assert cursor.fork([read, kept]) == kept


def test_the_follower_reads_again_after_the_newest_block_the_chain_still_has(
    w3, ledger, tmp_path, caplog
):
    start = w3.eth.block_number + 1
    journal = Seen(tmp_path / "journal.sqlite3")
    follower = EventFollower(w3, [ledger.zen], journal, journal.see, start_block=start)
    ledger.transfer(GOVERNOR, USER.address, 1)
    assert follower.follow() == 1
    kept = follower.cursor.last
    before = snapshot(w3)
    ledger.transfer(GOVERNOR, USER.address, 2)
    assert follower.follow() == 1

    revert(w3, before)
    ledger.transfer(GOVERNOR, USER.address, 3)
    with caplog.at_level(logging.WARNING, logger="marketplace.runtime.follower"):
        assert follower.follow() == 0
    (logged,) = caplog.records
    assert f"chain reorganised: block {kept.number + 1}" in logged.getMessage()
    assert "took back 1 records" in logged.getMessage()
    assert follower.cursor.position == journal.cursor(start) == (kept.number + 1, kept)
    assert journal.amounts() == [1]  # the dropped transfer's record is gone with its block

    assert follower.follow() == 1
    assert journal.amounts() == [1, 3]
    assert journal.cursor(start) == follower.cursor.position


class Tally(JournalDB):
    """A role whose state is what its handler replaced, updated and deleted: the last transfer,
    the sum of transfers, and a mark the transfer of 2 wipes, a blob it was given before."""

    ROLE_SCHEMA = """
    CREATE TABLE IF NOT EXISTS last (token TEXT PRIMARY KEY, amount INTEGER, seen REAL);
    CREATE TABLE IF NOT EXISTS total (token TEXT PRIMARY KEY, amount INTEGER, note TEXT);
    CREATE TABLE IF NOT EXISTS marks (name TEXT PRIMARY KEY, data BLOB);
    """

    def record(self, event) -> None:
        value = event["args"]["value"]
        self._run("INSERT OR REPLACE INTO last VALUES ('zen', ?, ?)", value, value / 4)
        self._run("UPDATE total SET amount = amount + ? WHERE token = 'zen'", value)
        if value == 2:
            self._run("DELETE FROM marks WHERE name = 'kept'")

    def state(self) -> tuple:
        return (
            self._run("SELECT * FROM last"),
            self._run("SELECT * FROM total"),
            self._run("SELECT * FROM marks"),
        )


def test_a_reorg_takes_back_what_the_dropped_events_replaced_updated_and_deleted(
    w3, ledger, tmp_path
):
    """The dropped transfer of 2 replaced the last transfer, added to the sum and deleted a mark:
    all three are as before it once the reorg is seen, while a change made outside a handler
    (the sum's note) stays, and the kept branch's transfer of 3 is recorded on top."""
    start = w3.eth.block_number + 1
    journal = Tally(tmp_path / "journal.sqlite3")
    journal._run("INSERT INTO total VALUES ('zen', 0, NULL)")
    journal._run("INSERT INTO marks VALUES ('kept', ?)", b"\x00\xff'")
    follower = EventFollower(w3, [ledger.zen], journal, journal.record, start_block=start)
    ledger.transfer(GOVERNOR, USER.address, 1)
    follower.follow()
    before = snapshot(w3)
    ledger.transfer(GOVERNOR, USER.address, 2)
    follower.follow()
    journal._run("UPDATE total SET note = 'looked at'")
    assert journal.state() == ([("zen", 2, 0.5)], [("zen", 3, "looked at")], [])

    revert(w3, before)
    ledger.transfer(GOVERNOR, USER.address, 3)
    follower.follow()
    assert journal.state() == (
        [("zen", 1, 0.25)],
        [("zen", 1, "looked at")],
        [("kept", b"\x00\xff'")],
    )

    follower.follow()
    assert journal.state() == (
        [("zen", 3, 0.75)],
        [("zen", 4, "looked at")],
        [("kept", b"\x00\xff'")],
    )

"""The worker after its slot was rolled back under it: a unit confirmed wrong voided the units
this node had committed on top of it, so they are trained and committed again."""

from __future__ import annotations

from types import SimpleNamespace

from node.daemon.journal import Journal, Unit
from node.daemon.worker import Worker, unit_key

JOB, SLOT = 7, 0


def worker(tmp_path) -> tuple[Worker, Journal]:
    journal = Journal(tmp_path / "journal.sqlite3")
    account = SimpleNamespace(address="0x" + "ab" * 20)
    # Forgetting voided units reads and writes the journal only.
    node = Worker(None, account, journal, None, None, None, replicas=0)  # type: ignore[arg-type]
    return node, journal


def journal_unit(journal: Journal, index: int, committed: bool) -> None:
    journal.add_unit(Unit(JOB, SLOT, index, f"bafy-{index}", f"{index:064x}", 1.0))
    if committed:
        journal.add_outgoing(unit_key(JOB, SLOT, index), "0x" + "00" * 32, b"raw")
        journal.finish_outgoing(unit_key(JOB, SLOT, index))


def test_units_committed_past_a_rollback_are_trained_again(tmp_path):
    node, journal = worker(tmp_path)
    # This node took the slot at unit 3, committed 3 and 4, and trained 5 ahead; the cheater's
    # unit 1 is then confirmed wrong and the chain's unitsDone goes back to 1.
    for index in (3, 4):
        journal_unit(journal, index, committed=True)
    journal_unit(journal, 5, committed=False)

    node.forget_voided(JOB, SLOT, 1)

    assert journal.units_from(JOB, SLOT, 0) == []
    assert journal.outgoing(unit_key(JOB, SLOT, 3)) is None  # so unit 3 is committed anew
    assert journal.outgoing(unit_key(JOB, SLOT, 4)) is None


def test_a_unit_trained_on_a_voided_state_is_trained_again(tmp_path):
    node, journal = worker(tmp_path)
    # This node took the slot at unit 5 and trained it from the cheater's unit 4, but had not
    # committed it yet when the cheater's unit 1 was confirmed wrong.
    node.forget_voided(JOB, SLOT, 5)
    journal_unit(journal, 5, committed=False)

    node.forget_voided(JOB, SLOT, 1)

    assert journal.units_from(JOB, SLOT, 0) == []


def test_a_unit_trained_but_not_yet_committed_is_no_rollback(tmp_path):
    node, journal = worker(tmp_path)
    # A crash between a unit's journal record and its commit: the chain is at 3, the journal
    # holds 2 (committed) and 3 (not yet).
    journal_unit(journal, 2, committed=True)
    journal_unit(journal, 3, committed=False)

    node.forget_voided(JOB, SLOT, 3)

    assert [u.index for u in journal.units_from(JOB, SLOT, 0)] == [2, 3]
    assert journal.outgoing(unit_key(JOB, SLOT, 2)) is not None

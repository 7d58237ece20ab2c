"""The provider daemon when the chain reorganises under it (Anvil's `anvil_reorg`): it sends again
the transactions a reorg dropped, and forgets a slot won only in dropped blocks."""

from __future__ import annotations

import pytest
from daemon_support import SPEC, wait_for
from test_daemon import assert_units, bids_in, create_job, events, reveals_in, wait_paid

from marketplace.chain.anvil import reorganize
from node.daemon.journal import Journal
from node.daemon.worker import Specs

pytestmark = [pytest.mark.slow, pytest.mark.anvil]


def read_past(journal: Journal, block: int) -> None:
    """Until the daemon's event cursor is past `block`: a reorg of it is one the daemon sees."""
    wait_for(lambda: journal.cursor(0)[0] > block, 30, f"the daemon to read block {block}")


def test_commits_a_reorg_dropped_are_sent_again(
    ledger, cast, onboarded, start_daemon, storage, tmp_path
):
    """The daemon commits every unit of its slot; a reorg drops the blocks from its first commit
    on, once it has read them: it sends each commit again, the same transactions in the same
    order, and the job completes again with every unit committed once, then settles and pays."""
    me = onboarded.address
    daemon = start_daemon()
    job_id = create_job(ledger, cast, storage)
    bids = bids_in(ledger, cast, job_id, me)
    reveals_in(ledger, job_id, bids, me)
    (completed,) = wait_for(lambda: events(ledger, "JobCompleted", job_id), 60, "the last unit")
    units = events(ledger, "CheckpointCommitted", job_id)
    commits = [unit["transactionHash"] for unit in units]
    journal = Journal(tmp_path / "home" / "node" / "journal.sqlite3")  # the daemon's own
    read_past(journal, completed["blockNumber"])

    reorganize(ledger.w3, units[0]["blockNumber"])
    assert events(ledger, "CheckpointCommitted", job_id) == []

    wait_paid(ledger, job_id, me)
    assert_units(ledger, storage, job_id, me, [u["args"]["stateHash"].hex() for u in units])
    again = [e["transactionHash"] for e in events(ledger, "CheckpointCommitted", job_id)]
    assert again == commits
    assert "chain reorganised" in daemon.output
    assert daemon.output.count("a reorg dropped unit:") == len(commits)
    journal.close()
    assert daemon.terminate() == 0


def test_a_slot_won_only_in_dropped_blocks_is_not_trained(
    ledger, cast, onboarded, start_daemon, storage, tmp_path
):
    """The daemon closes the auction and wins the slot; a reorg replaces the blocks from that one
    on with a branch where the user cancelled the job before anyone closed it. The daemon takes
    the slot back out of its journal, its close (sent again) fails, and it trains and commits
    nothing more for the job; its collateral is free again."""
    me, w3 = onboarded.address, ledger.w3
    free = ledger.free_stake(me)
    daemon = start_daemon()
    job_id = create_job(ledger, cast, storage)
    bids = bids_in(ledger, cast, job_id, me)
    reveals_in(ledger, job_id, bids, me)
    (won,) = wait_for(lambda: events(ledger, "SlotAssigned", job_id), 30, "the slot won")
    assert won["args"]["provider"] == me
    journal = Journal(tmp_path / "home" / "node" / "journal.sqlite3")  # the daemon's own
    read_past(journal, won["blockNumber"])
    assert job_id in journal.worked_jobs()

    cancel = {
        "from": cast.user.address,
        "to": ledger.market.address,
        "data": ledger.market.encode_abi("cancelJob", [job_id]),
        "gas": hex(1_000_000),
    }
    reorganize(w3, won["blockNumber"], [cancel])
    assert events(ledger, "JobCancelled", job_id)
    assert events(ledger, "SlotAssigned", job_id) == []

    wait_for(
        lambda: "failed once sent again after the reorg" in daemon.output,
        30,
        "the daemon's close sent again",
    )
    wait_for(lambda: job_id not in journal.worked_jobs(), 10, "the slot taken back")
    settled = w3.eth.block_number
    wait_for(lambda: w3.eth.block_number >= settled + 3, 30, "three more blocks")

    assert events(ledger, "CheckpointCommitted", job_id) == []
    assert journal.held_slots() == []
    assert ledger.free_stake(me) == free
    journal.close()
    assert daemon.process.poll() is None
    assert daemon.terminate() == 0


def test_a_job_id_a_reorg_gave_another_job_is_read_with_its_own_spec(
    ledger, cast, onboarded, storage
):
    """A provider read job N's spec; a reorg drops the job and job N is created again with
    another spec. Once the worker hears of the reorg it reads the new spec, not the one it
    kept by job id."""
    specs = Specs(ledger, storage)
    job_id = create_job(ledger, cast, storage)
    first = specs.of_job(job_id)
    (created,) = events(ledger, "JobCreated", job_id)

    reorganize(ledger.w3, created["blockNumber"])
    assert events(ledger, "JobCreated", job_id) == []
    other = SPEC.read_text().replace(f"name: {first.name}", "name: another-job", 1)
    assert create_job(ledger, cast, storage, other.encode()) == job_id

    specs.forget()  # what the worker does when its follower reports the reorg
    assert specs.of_job(job_id).name == "another-job"

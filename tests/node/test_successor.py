"""A node never trains on a unit whose checkpoint does not hold what was committed: asked to resume
from one (a cheater's, or one nobody serves), it flags the unit for verifiers and trains nothing;
a successor that flags the unit it took over from waits unslashed while the unit is reviewed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from marketplace.chain.anvil import advance_time
from marketplace.chain.errors import ChainError
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.scripted_job import Cast, Scenario, auction, onboard
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.runtime.outbox import Outbox
from marketplace.storage import Storage
from node.daemon.journal import Journal
from node.daemon.worker import BadInput, Specs, Worker

pytestmark = pytest.mark.anvil

SPEC = (Path(__file__).parents[2] / "node/specs/tiny.yaml").read_text()
NOBODY_SERVES = "QmYwAPJzv5CZsnAzt8auVZRn1TXsBMo4UWmpuEFkqq4Dst"  # a CID no node here holds


@pytest.fixture
def two_slots(fresh_ledger, ipfs_nodes):
    """A two-node job auctioned to a cheater (slot 0) and an honest node (slot 1)."""
    ledger = fresh_ledger
    actors = [devnet_account(i) for i in range(40, 46)]
    for actor in actors:
        ledger.w3.provider.make_request("anvil_setBalance", [actor.address, hex(10**20)])
    cast = Cast(devnet_account(0), actors[0], tuple(actors[1:3]), tuple(actors[4:5]))
    scenario = Scenario(nodes=2, units=2, sample_rate_bps=0, bids=(60 * 10**18, 70 * 10**18))
    onboard(ledger, cast, scenario)
    with Storage(ipfs_nodes[0].multiaddr, []) as storage:
        outcome, slots = auction(ledger, cast, scenario, storage.add_bytes(SPEC.encode()))
        account = {p.address: p for p in cast.providers}
        by_slot = {slot: account[address] for address, slot in slots.items()}
        yield ledger, storage, outcome.job_id, by_slot[0], by_slot[1]


def worker_of(ledger, storage, account, tmp_path) -> Worker:
    journal = Journal(tmp_path / "journal.sqlite3")
    outbox = Outbox(ledger.w3, account, journal)
    return Worker(ledger, account, journal, outbox, Specs(ledger, storage), storage, replicas=1)


def commit(ledger, provider, job_id, slot, cid, state_hash: str) -> None:
    ledger.commit_checkpoint(provider, job_id, slot, cid, bytes.fromhex(state_hash))


def checkpoint(value: float) -> Checkpoint:
    return Checkpoint({"model": {"w": torch.full((4,), value)}}, {})


@pytest.mark.parametrize("served", [True, False], ids=["another-state", "withheld"])
def test_a_unit_whose_checkpoint_is_not_its_commitment_is_flagged_not_built_on(
    two_slots, tmp_path, served
):
    ledger, storage, job_id, cheater, honest = two_slots
    committed, shipped = checkpoint(1.0), checkpoint(2.0)
    cid = storage.add_bytes(shipped.to_bytes()) if served else NOBODY_SERVES
    commit(ledger, cheater, job_id, 0, cid, committed.state_hash())
    worker = worker_of(ledger, storage, honest, tmp_path)

    with pytest.raises(BadInput, match="unit 0"):
        worker._checkpoint(job_id, 0, 0)

    [flagged] = ledger.verification.events.UnitFlagged().get_logs(
        from_block=0, argument_filters={"jobId": job_id}
    )
    assert (flagged["args"]["slot"], flagged["args"]["index"]) == (0, 0)
    assert flagged["args"]["by"] == honest.address
    with pytest.raises(BadInput):  # asked again: still refused, and flagged only once
        worker._checkpoint(job_id, 0, 0)
    flags = ledger.verification.events.UnitFlagged().get_logs(
        from_block=0, argument_filters={"jobId": job_id}
    )
    assert len(flags) == 1


def test_an_honest_units_checkpoint_is_resumed_from(two_slots, tmp_path):
    ledger, storage, job_id, provider, honest = two_slots
    unit = checkpoint(3.0)
    commit(ledger, provider, job_id, 0, storage.add_bytes(unit.to_bytes()), unit.state_hash())
    resumed = worker_of(ledger, storage, honest, tmp_path)._checkpoint(job_id, 0, 0)
    assert resumed.state_hash() == unit.state_hash()


def test_a_successor_handed_a_withheld_checkpoint_is_not_slashed_while_it_is_reviewed(
    fresh_ledger, ipfs_nodes, tmp_path
):
    ledger = fresh_ledger
    actors = [devnet_account(i) for i in range(50, 55)]
    for actor in actors:
        ledger.w3.provider.make_request("anvil_setBalance", [actor.address, hex(10**20)])
    user, cheater, successor, watcher = actors[0], actors[1], actors[2], actors[3]
    cast = Cast(devnet_account(0), user, (cheater, successor), (actors[4],))
    scenario = Scenario(units=2, sample_rate_bps=0, bids=(60 * 10**18, 70 * 10**18))
    onboard(ledger, cast, scenario)
    with Storage(ipfs_nodes[0].multiaddr, []) as storage:
        outcome, slots = auction(ledger, cast, scenario, storage.add_bytes(SPEC.encode()))
        job_id = outcome.job_id
        assert slots == {cheater.address: 0}
        commit(ledger, cheater, job_id, 0, NOBODY_SERVES, checkpoint(1.0).state_hash())
        interval = scenario.checkpoint_interval
        advance_time(ledger.w3, max(interval, ledger.verification_window()) + 1)
        ledger.send(ledger.report_downtime_call(job_id, 0), watcher)  # the cheater goes down
        bid = ledger.commit_bid(successor, job_id, 70 * 10**18)
        advance_time(ledger.w3, ledger.market.functions.bidWindow().call() + 1)
        ledger.reveal_bid(successor, bid)
        advance_time(ledger.w3, ledger.market.functions.revealWindow().call() + 1)
        ledger.close_auction(successor, job_id)
        assert ledger.slot(job_id, 0)["provider"] == successor.address

        with pytest.raises(BadInput, match="unit 0"):
            worker_of(ledger, storage, successor, tmp_path)._checkpoint(job_id, 0, 0)

    review = ledger.verification.functions.inputUnderReviewUntil(job_id, 0).call()
    now = ledger.w3.eth.get_block("latest")["timestamp"]
    assert review > now + interval, "its window opened again, past the successor's deadline"
    advance_time(ledger.w3, review - now)  # past the deadline it had without the review
    with pytest.raises(ChainError, match="not overdue"):
        ledger.send(ledger.report_downtime_call(job_id, 0), watcher)
    assert ledger.market.functions.slashedIn(job_id, successor.address).call() == 0

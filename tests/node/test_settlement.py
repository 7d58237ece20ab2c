"""The provider's settler on a real Anvil: it drives a completed job to settlement, expiring a
dispute nobody answered in time, and withdraws its pay."""

from __future__ import annotations

import pytest

from marketplace.chain.anvil import advance_time
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.scripted_job import Cast, Scenario, cid_of_bytes, onboard, run_job
from marketplace.protocol.terms import JobStatus
from marketplace.runtime.outbox import Outbox
from node.daemon.journal import Journal
from node.daemon.settlement import Settler

pytestmark = pytest.mark.anvil


def test_the_settler_expires_an_unanswered_dispute_and_is_paid(own_ledger, tmp_path):
    ledger = own_ledger
    actors = [devnet_account(i) for i in range(20, 26)]
    for actor in actors:
        ledger.w3.provider.make_request("anvil_setBalance", [actor.address, hex(10**20)])
    cast = Cast(devnet_account(0), actors[0], tuple(actors[1:4]), tuple(actors[4:6]))
    scenario = Scenario(units=2, sample_rate_bps=10_000, verdict=False)
    onboard(ledger, cast, scenario)
    outcome = run_job(ledger, cast, scenario, cid_of_bytes(b"job spec"), settle=False)
    job_id, winner = outcome.job_id, outcome.winners[0]
    provider = next(p for p in cast.providers if p.address == winner)
    assert ledger.open_disputes(job_id) == 2
    journal = Journal(tmp_path / "journal.sqlite3")
    journal.hold_slot(job_id, 0)
    settler = Settler(ledger, provider, journal, Outbox(ledger.w3, provider, journal))
    balance = ledger.balance(winner)

    settler.tick(ledger.w3.eth.get_block("latest")["timestamp"])
    assert ledger.job(job_id)["status"] == JobStatus.COMPLETED  # windows still open: it waits

    advance_time(ledger.w3, max(ledger.verification_window(), ledger.dispute_window()) + 1)
    settler.tick(ledger.w3.eth.get_block("latest")["timestamp"])

    assert ledger.job(job_id)["status"] == JobStatus.SETTLED
    expired = ledger.verification.events.DisputeExpired().get_logs(from_block=0)
    assert len([e for e in expired if e["args"]["jobId"] == job_id]) == 2
    earned = sum(u.amount for u in outcome.units)
    assert ledger.balance(winner) - balance == earned - earned * 500 // 10_000
    assert journal.payouts("withdrawn") == [job_id]
    journal.close()

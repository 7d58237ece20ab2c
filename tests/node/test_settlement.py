"""The provider's settler on a real Anvil: it drives a completed job to settlement, expiring a
dispute or a bandwidth complaint nobody answered in time, and withdraws its pay."""

from __future__ import annotations

import hashlib

import pytest

from marketplace.chain.anvil import advance_time
from marketplace.chain.errors import ChainError
from marketplace.chain.ledger import Ledger
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.scripted_job import (
    Cast,
    Scenario,
    auction,
    checkpoint_bytes,
    cid_of_bytes,
    onboard,
    run_job,
)
from marketplace.protocol.terms import JobStatus
from marketplace.runtime.clock import revert_name
from marketplace.runtime.outbox import Outbox
from node.daemon.journal import Journal
from node.daemon.settlement import Settler

pytestmark = pytest.mark.anvil

FEE_BPS = 500


@pytest.fixture
def own_cast(own_ledger) -> Cast:
    """Actors of the test's own: a user, three providers, two verifiers, funded with ETH."""
    actors = [devnet_account(i) for i in range(20, 26)]
    for actor in actors:
        own_ledger.w3.provider.make_request("anvil_setBalance", [actor.address, hex(10**20)])
    return Cast(devnet_account(0), actors[0], tuple(actors[1:4]), tuple(actors[4:6]))


def settler_of(ledger: Ledger, cast: Cast, winner: str, job_id: int, journal: Journal) -> Settler:
    """The winning provider's settler, with the job's slot in its journal."""
    provider = next(p for p in cast.providers if p.address == winner)
    journal.hold_slot(job_id, 0)
    return Settler(ledger, provider, journal, Outbox(ledger.w3, provider, journal))


def now(ledger: Ledger) -> int:
    return ledger.w3.eth.get_block("latest")["timestamp"]


def test_the_settler_expires_an_unanswered_dispute_and_is_paid(own_ledger, own_cast, tmp_path):
    ledger, cast = own_ledger, own_cast
    scenario = Scenario(units=2, sample_rate_bps=10_000, verdict=False)
    onboard(ledger, cast, scenario)
    outcome = run_job(ledger, cast, scenario, cid_of_bytes(b"job spec"), settle=False)
    job_id, winner = outcome.job_id, outcome.winners[0]
    assert ledger.open_disputes(job_id) == 2
    journal = Journal(tmp_path / "journal.sqlite3")
    settler = settler_of(ledger, cast, winner, job_id, journal)
    balance = ledger.balance(winner)

    settler.tick(now(ledger))
    assert ledger.job(job_id)["status"] == JobStatus.COMPLETED  # windows still open: it waits

    advance_time(ledger.w3, max(ledger.verification_window(), ledger.dispute_window()) + 1)
    settler.tick(now(ledger))

    assert ledger.job(job_id)["status"] == JobStatus.SETTLED
    expired = ledger.verification.events.DisputeExpired().get_logs(from_block=0)
    assert len([e for e in expired if e["args"]["jobId"] == job_id]) == 2
    earned = sum(u.amount for u in outcome.units)
    assert ledger.balance(winner) - balance == earned - earned * FEE_BPS // 10_000
    assert journal.payouts("withdrawn") == [job_id]
    journal.close()


def test_the_settler_expires_an_unanswered_bandwidth_complaint_and_is_paid(
    own_ledger, own_cast, tmp_path
):
    """A verifier complains about the winner's bandwidth while the job runs, with evidence, and
    no verifier judges it: once its window is over the provider's settler expires it (nobody is
    slashed) and settles the job, which waited on it."""
    ledger, cast = own_ledger, own_cast
    scenario = Scenario(units=2, sample_rate_bps=0)
    onboard(ledger, cast, scenario)
    outcome, slots = auction(ledger, cast, scenario, cid_of_bytes(b"job spec"))
    job_id, winner = outcome.job_id, outcome.winners[0]
    challenger = cast.verifiers[0]
    complain = ledger.verification.functions.complainBandwidth
    with pytest.raises(ChainError) as refused:
        ledger.send(complain(job_id, winner, ""), challenger)
    assert revert_name(refused.value) == "NoEvidence"
    ledger.send(complain(job_id, winner, cid_of_bytes(b"measurements")), challenger)
    with pytest.raises(ChainError) as refused:
        ledger.send(complain(job_id, winner, cid_of_bytes(b"more")), cast.verifiers[1])
    assert revert_name(refused.value) == "ComplaintOpen"  # one open complaint at a time

    provider = next(p for p in cast.providers if p.address == winner)
    units = []
    for index in range(scenario.units):
        data = checkpoint_bytes(job_id, slots[winner], index)
        digest = hashlib.sha256(data).digest()
        units.append(
            ledger.commit_checkpoint(provider, job_id, slots[winner], cid_of_bytes(data), digest)
        )
    assert ledger.job(job_id)["status"] == JobStatus.COMPLETED
    assert ledger.open_disputes(job_id) == 1
    stakes = {a: ledger.staking_account(a)["staked"] for a in (winner, challenger.address)}
    journal = Journal(tmp_path / "journal.sqlite3")
    settler = settler_of(ledger, cast, winner, job_id, journal)
    balance = ledger.balance(winner)

    advance_time(ledger.w3, ledger.verification_window() + 1)
    assert ledger.verification_window() < ledger.dispute_window()
    settler.tick(now(ledger))  # the complaint's window is still open: settlement waits
    assert ledger.job(job_id)["status"] == JobStatus.COMPLETED
    advance_time(ledger.w3, ledger.dispute_window())
    settler.tick(now(ledger))

    assert ledger.job(job_id)["status"] == JobStatus.SETTLED
    (closed,) = ledger.verification.events.BandwidthComplaintClosed().get_logs(
        from_block=0, argument_filters={"jobId": job_id}
    )
    assert closed["args"]["provider"] == winner and not closed["args"]["confirmed"]
    assert int(closed["args"]["resolver"], 16) == 0  # expired, not judged
    assert ledger.open_disputes(job_id) == 0
    assert {a: ledger.staking_account(a)["staked"] for a in stakes} == stakes
    earned = sum(u.amount for u in units)
    assert ledger.balance(winner) - balance == earned - earned * FEE_BPS // 10_000
    assert journal.payouts("withdrawn") == [job_id]
    journal.close()

"""A whole job on a real Anvil: stake, auction, checkpoints, verification, settlement,
withdrawals."""

from __future__ import annotations

import pytest

from marketplace.chain.anvil import advance_time
from marketplace.devnet.scripted_job import Scenario, cid_of_bytes, onboard, run_job
from marketplace.jobs import ChainJob
from marketplace.protocol.terms import JobStatus

FEE_BPS = 500


@pytest.mark.anvil
@pytest.mark.parametrize("nodes", [1, 2])
def test_job_settles_every_balance_to_the_wei(ledger, cast, nodes):
    scenario = Scenario(nodes=nodes, units=4)
    users_cast = cast.__class__(cast.governor, cast.user, cast.providers, cast.verifiers[:1])
    onboard(ledger, users_cast, scenario)
    treasury_before = ledger.balance(ledger.treasury.address)

    outcome = run_job(ledger, users_cast, scenario, cid_of_bytes(b"job spec"))

    # The `nodes` lowest bids win, at one uniform price: the highest winning bid.
    ranked = sorted(zip(scenario.bids, cast.providers), key=lambda pair: pair[0])
    assert sorted(outcome.winners) == sorted(p.address for _, p in ranked[:nodes])
    assert outcome.clearing_price == ranked[nodes - 1][0]

    # Every unit is paid what the job says it is worth: unitGpuSeconds x price / 3600, rounded
    # down, nothing else.
    per_unit = scenario.unit_gpu_seconds * outcome.clearing_price // 3600
    assert [u.amount for u in outcome.units] == [per_unit] * (nodes * scenario.units)
    earned = per_unit * scenario.units  # per winner
    fee_each = earned * FEE_BPS // 10_000
    payment, fee = earned * nodes, fee_each * nodes
    refund = scenario.budget - payment
    settlement = outcome.settlement
    assert (settlement["payment"], settlement["fee"], settlement["refund"]) == (
        payment,
        fee,
        refund,
    )

    verifications = len(outcome.verified)
    each = (
        min(ledger.market.functions.verificationFee().call(), fee // verifications)
        if verifications
        else 0
    )
    assert settlement["verifierPool"] == each * verifications

    # Balances, to the wei.
    funding = scenario.funding
    assert ledger.balance(cast.user.address) == funding - scenario.budget + refund
    for _, provider in ranked[:nodes]:
        assert (
            ledger.balance(provider.address)
            == funding - scenario.provider_stake + earned - fee_each
        )
        assert ledger.staking_account(provider.address)["locked"] == 0
    for _, provider in ranked[nodes:]:
        assert ledger.balance(provider.address) == funding - scenario.provider_stake
    verifier = cast.verifiers[0]
    assert (
        ledger.balance(verifier.address) == funding - scenario.verifier_stake + each * verifications
    )
    assert ledger.balance(ledger.treasury.address) - treasury_before == fee - each * verifications
    # Nothing is left behind: escrow = payouts + fees + refund.
    assert ledger.balance(ledger.market.address) == 0
    assert ledger.balance(ledger.staking.address) == (
        len(cast.providers) * scenario.provider_stake + scenario.verifier_stake
    )
    assert ledger.job(outcome.job_id)["status"] == JobStatus.SETTLED


@pytest.mark.anvil
def test_a_dispute_nobody_answers_is_expired_and_the_job_settles(ledger, cast, caplog):
    """One verifier posts a failure and no second verifier answers: the user's journey expires
    the dispute once its window is over (the unit counts as passed, nobody is slashed) and
    settles, saying meanwhile what it waits for."""
    scenario = Scenario(units=1, sample_rate_bps=10_000, verdict=False)
    onboard(ledger, cast, scenario)
    outcome = run_job(ledger, cast, scenario, cid_of_bytes(b"job spec"), settle=False)
    job_id = outcome.job_id
    assert ledger.open_disputes(job_id) == 1
    [pending] = ledger.pending_disputes(job_id)
    assert pending.key == "unit:0:0"
    staked = ledger.staking_account(outcome.winners[0])["staked"]

    said: list[str] = []
    job = ChainJob(ledger, cast.user, job_id, poll=0.05)
    assert job.snapshot().expirable_disputes == 0
    job.wait(until=JobStatus.COMPLETED)  # completed already: nothing is expired on the way
    assert ledger.open_disputes(job_id) == 1

    advance_time(ledger.w3, max(ledger.verification_window(), ledger.dispute_window()) + 1)
    job.wait(on_wait=said.append)

    assert ledger.job(job_id)["status"] == JobStatus.SETTLED
    assert ledger.pending_disputes(job_id) == []
    [expired] = ledger.verification.events.DisputeExpired().get_logs(from_block=0)
    assert (expired["args"]["slot"], expired["args"]["index"]) == (0, 0)
    assert ledger.staking_account(outcome.winners[0])["staked"] == staked  # nobody slashed
    assert job.settlement().payment == outcome.units[0].amount  # the unit is paid
    assert said[0].startswith("1 dispute(s) open")

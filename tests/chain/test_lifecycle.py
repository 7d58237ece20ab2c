"""A whole job on a real Anvil: stake, auction, checkpoints, verification, settlement,
withdrawals."""

from __future__ import annotations

import pytest

from marketplace.devnet.scripted_job import Scenario, cid_of_bytes, onboard, run_job
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

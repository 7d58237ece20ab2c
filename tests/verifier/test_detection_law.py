"""The detection law 1 - (1 - p)^n, checked empirically, and no false failures on honest work."""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace

import pytest
from sampling_support import binomial_stderr, detection_probability, is_sampled, simulate_caught

from marketplace.chain.anvil import mine
from marketplace.chain.errors import ChainError
from marketplace.chain.tx import call
from marketplace.protocol.units import unit_steps, units_per_node
from marketplace.runtime.clock import revert_name
from node.engine import run_unit, unit_shard
from verifier.recompute import UnitInputs, recompute

JOBS = 4_000  # simulated jobs per (p, n): the binomial standard error stays under 0.8%
# (unit, block) pairs the Python rule and the contract are both asked about: a rule that differs
# on even 1% of inputs disagrees on one of them with probability 1 - 0.99^320 > 95%, and a wrong
# encoding (which differs on about 37% at a 25% rate) always does.
PAIRS = 320
RATE_BPS = 2_500


@pytest.mark.anvil
def test_python_sampling_rule_matches_the_contract(job):
    """On random (unit, block) pairs, the Python rule and Verification.isSampled agree, and they
    sample at the job's rate."""
    provider = job(RATE_BPS)
    ledger = provider.ledger
    mine(ledger.w3, 60)
    head = ledger.w3.eth.block_number
    rng = random.Random(5)
    # Only blocks whose successor's hash the EVM still serves (the last 256): past that an
    # unrecorded seed is lost and the contract samples nothing.
    blocks = range(max(1, head - 250), head - 1)
    seeds: dict[int, bytes] = {}
    sampled = 0
    for _ in range(PAIRS):
        block, slot, index = rng.choice(blocks), rng.randrange(4), rng.randrange(1_000)
        if block not in seeds:
            seeds[block] = bytes(ledger.w3.eth.get_block(block + 1)["hash"])
        expected = call(
            ledger.verification.functions.isSampled(provider.job_id, slot, index, block)
        )
        assert is_sampled(seeds[block], provider.job_id, slot, index, RATE_BPS) == expected
        sampled += expected
    # Both outcomes occur, so the comparison meant something; and at the job's rate, within four
    # standard errors (about 10 points here; a false alarm about once in 16,000 runs).
    rate = RATE_BPS / 10_000
    assert abs(sampled / PAIRS - rate) <= 4 * binomial_stderr(rate, PAIRS)


@pytest.mark.anvil
def test_a_recorded_seed_outlives_the_evms_memory_and_a_lost_one_samples_nothing(job):
    """Past 256 blocks the EVM forgets a block hash: a unit whose seed was recorded in time stays
    sampled, one whose seed nobody recorded is sampled by nothing, and its seed cannot be made
    up later."""
    provider = job(10_000)
    ledger = provider.ledger
    kept, lost = provider.honest(0), provider.honest(1)
    mine(ledger.w3, 2)
    assert ledger.is_sampled(kept) and ledger.is_sampled(lost)
    ledger.send(ledger.record_seed_call(kept.block_number), provider.account)
    seed = bytes(ledger.w3.eth.get_block(kept.block_number + 1)["hash"])
    assert ledger.recorded_seed(kept.block_number) == seed

    mine(ledger.w3, 260)
    assert ledger.is_sampled(kept)
    assert not ledger.is_sampled(lost)
    assert ledger.recorded_seed(lost.block_number) == bytes(32)
    with pytest.raises(ChainError) as refused:
        ledger.send(ledger.record_seed_call(lost.block_number), provider.account)
    assert revert_name(refused.value) == "SeedLost"


@pytest.mark.parametrize("rate_bps", [500, 2_000])
@pytest.mark.parametrize("faked_units", [1, 3, 10])
def test_fraction_of_cheaters_caught_matches_the_law(rate_bps, faked_units):
    caught = simulate_caught(
        rate_bps, faked_units, JOBS, random.Random(rate_bps * 100 + faked_units)
    )
    expected = detection_probability(rate_bps, faked_units)
    assert abs(caught / JOBS - expected) <= 4 * binomial_stderr(expected, JOBS)


def test_detection_probability_closed_form():
    assert detection_probability(10_000, 1) == 1
    assert detection_probability(0, 50) == 0
    assert detection_probability(1_000, 2) == pytest.approx(0.19)


def test_lost_seed_samples_nothing():
    assert not is_sampled(bytes(32), 1, 0, 0, 10_000)


@pytest.mark.slow
def test_honest_reruns_never_fail_and_a_faked_unit_always_does(spec, spec_cid, storage):
    """Every honest unit of three slots passes its re-run; each with a faked hash fails."""
    verdicts = []
    for slot in range(3):
        previous, previous_cid = None, None
        for index in range(units_per_node(spec)):
            result = run_unit(
                spec, previous, unit_shard(spec, slot), unit_steps(spec, index), device="cpu"
            )
            cid = storage.add_bytes(result.checkpoint.to_bytes())
            honest = UnitInputs(
                job_id=1,
                slot=slot,
                index=index,
                provider="0x" + "11" * 20,
                spec_cid=spec_cid,
                cid=cid,
                state_hash=result.state_hash,
                previous_cid=previous_cid,
                previous_state_hash=previous.state_hash() if previous else None,
            )
            faked = replace(honest, state_hash=hashlib.sha256(cid.encode()).hexdigest())
            verdicts.append((recompute(honest, storage).passed, recompute(faked, storage).passed))
            previous, previous_cid = result.checkpoint, cid
    assert verdicts == [(True, False)] * 9

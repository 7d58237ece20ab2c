"""Whole jobs on the devnet: honest training settled to the wei, a cheater caught and replaced,
a provider lost mid-job and its work resumed elsewhere."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from marketplace import jobs
from marketplace.chain.deploy import ZEN
from marketplace.devnet.chaos import Monkey
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.terms import JobStatus
from node.engine import load_spec, run_unit, unit_shard

from .conftest import SPEC, wait_for, wait_for_fee_claims

pytestmark = pytest.mark.slow

FEE_BPS = 500
DOWNTIME, INCORRECT_COMPUTATION = 0, 1


@pytest.fixture(scope="module")
def uninterrupted():
    """The state hash of the tiny spec trained start to end in one process: the reference."""
    spec = load_spec(SPEC)
    _, state_hash, _ = run_unit(spec, None, unit_shard(spec, 0), spec.training.max_steps)
    return state_hash


def final_unit(ledger, job_id: int) -> dict:
    (unit,) = jobs.latest_units(ledger, job_id)
    return unit


def settled(ledger, job_id: int) -> dict:
    (event,) = ledger.market.events.JobSettled().get_logs(
        from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id}
    )
    return event["args"]


def slashes(ledger, account: str, since: int | None = None) -> list[int]:
    """The reasons `account` was slashed for, since block `since` (default: ever)."""
    logs = ledger.staking.events.Slashed().get_logs(
        from_block=ledger.deployment.deploy_block if since is None else since,
        argument_filters={"account": account},
    )
    return [log["args"]["reason"] for log in logs]


def test_honest_job_settles_every_balance_to_the_wei(network, tmp_path, uninterrupted):
    """Meanwhile the verifiers, their worker and the gateway's indexer are killed (kill -9) at
    random and started again: none of it costs anyone a wei or slashes anyone."""
    ledger = network.ledger
    verifiers = [a for n, a in network.state.accounts.items() if n.startswith("verifier")]
    providers = [a for n, a in network.state.accounts.items() if n.startswith("provider")]
    watched = [
        network.user.address,
        ledger.treasury.address,
        ledger.market.address,
        *providers,
        *verifiers,
    ]
    before = {a: ledger.balance(a) for a in watched}

    weights = tmp_path / "weights.pt"
    off_the_training_path = ("verifier-", "worker-", "gateway-indexer")
    first_block = ledger.w3.eth.block_number
    with Monkey(network.devnet, off_the_training_path, every=12, seed=7) as monkey:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "marketplace.cli",
                "train",
                "--config",
                str(SPEC),
                "--max-budget",
                "5000",
                "--sample-rate",
                "5000",
                "--output",
                str(weights),
            ],
            env=network.env(),
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(monkey.strikes) >= 2, monkey.strikes
    assert "settled in block" in result.stdout and weights.exists()

    job_id = ledger.market.functions.jobCount().call()
    s = settled(ledger, job_id)
    market = ledger.market.functions
    earned = {p: market.earned(job_id, p).call() for p in market.participants(job_id).call()}
    counts = {v: ledger.verification.functions.verificationsBy(job_id, v).call() for v in verifiers}
    each = ledger.job(job_id)["verifierFeeEach"]
    # The daemons collect on their own: providers withdraw, verifiers claim their share.
    wait_for_fee_claims(ledger, job_id, verifiers)
    wait_for(lambda: all(ledger.owed(a) == 0 for a in [*earned, *verifiers]), 120, "payouts")

    assert s["payment"] == sum(earned.values())
    assert s["fee"] == sum(e * FEE_BPS // 10_000 for e in earned.values())
    assert s["refund"] == 5_000 * ZEN - s["payment"]
    assert s["verifierPool"] == each * sum(counts.values())
    after = {a: ledger.balance(a) for a in watched}
    assert after[network.user.address] - before[network.user.address] == -s["payment"]
    for provider in providers:
        pay = earned.get(provider, 0)
        assert after[provider] - before[provider] == pay - pay * FEE_BPS // 10_000
    for verifier in verifiers:
        assert after[verifier] - before[verifier] == counts[verifier] * each
    assert (
        after[ledger.treasury.address] - before[ledger.treasury.address]
        == s["fee"] - s["verifierPool"]
    )
    assert after[ledger.market.address] == before[ledger.market.address]
    assert not any(slashes(ledger, a, since=first_block) for a in [*providers, *verifiers])

    # The result reproduces: the final checkpoint holds the state an uninterrupted run reaches,
    # and the loss fell from the first unit to the last.
    last = final_unit(ledger, job_id)
    assert bytes(last["stateHash"]).hex() == uninterrupted
    with network.storage() as storage:
        first_cid = ledger.market.events.CheckpointCommitted().get_logs(
            from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id}
        )[0]["args"]["cid"]
        first_loss = Checkpoint.load(storage.cat(first_cid)).metadata["metrics"]["loss"]
        last_loss = Checkpoint.load(storage.cat(last["cid"])).metadata["metrics"]["loss"]
    assert last_loss < first_loss - 0.3

    # The providers posted a line to the job's log at the devnet's gateway for each unit they
    # committed.
    url = network.state.gateway_url
    committed = ledger.market.events.CheckpointCommitted().get_logs(
        from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id}
    )
    wait_for(
        lambda: len(httpx.get(f"{url}/jobs/{job_id}/logs").json()) == len(committed),
        60,
        "a line per unit",
    )
    logs = subprocess.run(
        [sys.executable, "-m", "marketplace.cli", "jobs", "--gateway", url, "logs", str(job_id)],
        check=False,
        env=network.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert logs.returncode == 0 and logs.stderr == "", logs.stderr
    assert [line.split("  ", 1)[1].split(":")[0] for line in logs.stdout.splitlines()] == [
        f"slot {unit['args']['slot']} unit {unit['args']['index']}" for unit in committed
    ]


def test_cheater_is_caught_slashed_and_replaced(network, uninterrupted):
    ledger = network.ledger
    [cheater] = network.enlist(11)
    with network.storage() as storage:
        # Every unit is sampled, and the cheater underbids the honest providers.
        order = jobs.Order(
            max_budget=5_000 * ZEN,
            max_price=100 * ZEN,
            sample_rate_bps=10_000,
            checkpoint_interval=300,
        )
        job_id = jobs.submit(ledger, network.user, storage, SPEC.read_text(), order)
        network.take((cheater, network.underbid(cheater, job_id)))

        # It commits a unit whose state it did not compute: one step instead of the unit's.
        spec = load_spec(SPEC)
        fake, fake_hash, _ = run_unit(spec, None, unit_shard(spec, 0), 1)
        cid = storage.add_bytes(fake.to_bytes())
        storage.pin(cid, replicas=3)
        ledger.commit_checkpoint(cheater, job_id, 0, cid, bytes.fromhex(fake_hash))

        wait_for(
            lambda: INCORRECT_COMPUTATION in slashes(ledger, cheater.address),
            180,
            "the cheater's slash",
        )
        wait_for(
            lambda: ledger.market.functions.status(job_id).call() == JobStatus.COMPLETED,
            400,
            "an honest provider to finish the job",
        )
        job = jobs.ChainJob(ledger, network.user, job_id)
        job.wait()
        settlement = job.settlement()

    market = ledger.market.functions
    assert market.earned(job_id, cheater.address).call() == 0
    honest = [p for p in market.participants(job_id).call() if p != cheater.address]
    assert honest and settlement.payment == sum(market.earned(job_id, p).call() for p in honest)
    assert bytes(final_unit(ledger, job_id)["stateHash"]).hex() == uninterrupted


def test_provider_lost_mid_job_is_replaced_and_nothing_is_lost(network, uninterrupted):
    ledger = network.ledger
    with network.storage() as storage:
        order = jobs.Order(max_budget=5_000 * ZEN, max_price=100 * ZEN, checkpoint_interval=40)
        job_id = jobs.submit(ledger, network.user, storage, SPEC.read_text(), order)
        jobs.ChainJob(ledger, network.user, job_id).wait(
            until=JobStatus.RUNNING, auction_timeout=60
        )
        first = ledger.slot(job_id, 0)["provider"]
        wait_for(lambda: ledger.slot(job_id, 0)["unitsDone"] >= 2, 120, "two checkpoints")
        network.kill(first)

        wait_for(lambda: DOWNTIME in slashes(ledger, first), 180, "the downtime report")
        wait_for(
            lambda: ledger.market.functions.status(job_id).call() == JobStatus.COMPLETED,
            400,
            "another provider to finish the job",
        )
        job = jobs.ChainJob(ledger, network.user, job_id)
        job.wait()
        settlement = job.settlement()

    market = ledger.market.functions
    successors = [p for p in market.participants(job_id).call() if p != first]
    assert successors, "the slot was re-auctioned to another provider"
    kept = market.earned(job_id, first).call()
    assert kept > 0, "the lost provider keeps the pay of the checkpoints it delivered"
    assert settlement.payment == kept + sum(market.earned(job_id, p).call() for p in successors)
    # Resumed from the last accepted checkpoint on another machine, bit for bit.
    assert bytes(final_unit(ledger, job_id)["stateHash"]).hex() == uninterrupted

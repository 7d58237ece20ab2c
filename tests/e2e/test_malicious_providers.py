"""Malicious providers on the devnet, beside honest ones: a job spec that reads outside the
providers' data directories is refused before anyone bids; a provider that stops serving its
checkpoints after unit 0 and one that commits another job's checkpoint are caught at once, each
in a job of its own, and slashed; the honest providers that take their slots over finish the jobs
and are paid to the wei, their stakes intact."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from web3 import Web3

from marketplace import jobs
from marketplace.chain.deploy import ZEN
from marketplace.chain.ledger import Ledger
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.scripted_job import cid_of_bytes
from marketplace.protocol.journey import NoBids
from marketplace.protocol.terms import JobStatus
from marketplace.protocol.units import unit_steps
from node.engine import parse_spec, run_unit, unit_shard
from node.engine.unit import UnitResult

from .conftest import SPEC, wait_for

pytestmark = pytest.mark.slow

FEE_BPS = 500
WITHHOLDER, COPIER, KEEPER = 12, 13, 14  # accounts nothing else on the devnet uses
ORDER = jobs.Order(
    max_budget=1_000 * ZEN,
    max_price=100 * ZEN,
    sample_rate_bps=10_000,  # every unit is re-run
    checkpoint_interval=300,
)


def small_spec(seed: int, **data) -> str:
    """The tiny spec cut to two units of two steps, seeded `seed`: jobs with different seeds
    reach different states."""
    document = yaml.safe_load(SPEC.read_text())
    document["training"] |= {"max_steps": 4, "warmup_steps": 1, "eval_batches": 1}
    document["checkpoint"]["every"] = 2
    document["reproducibility"]["seed"] = seed
    document["data"] |= data
    return yaml.safe_dump(document, sort_keys=False)


def honest_state(spec_text: str) -> str:
    """The state hash the spec reaches trained start to end in one process."""
    spec = parse_spec(spec_text)
    return run_unit(spec, None, unit_shard(spec, 0), spec.training.max_steps).state_hash


def provider_names(network) -> list[str]:
    """The providers whose daemons run: an earlier test may have killed one for good."""
    return [s.name for s in network.state.running() if s.name.startswith("provider-")]


def test_a_spec_reading_outside_the_data_directories_gets_no_bid(network):
    """The spec's `file` source is the devnet's wallet password file, outside every provider's
    data folder: each provider says why it does not bid, and the user cancels for a full
    refund."""
    ledger, user = network.ledger, network.user
    wait_for(lambda: not _running_jobs(ledger), 300, "the providers to be free")
    before = ledger.balance(user.address)
    stolen = network.root / "password"
    spec = small_spec(1, sources=[{"kind": "file", "path": str(stolen)}])
    with network.storage() as storage:
        job_id = jobs.submit(ledger, user, storage, spec, ORDER)
    logs = [Path(network.state.service(name).log) for name in provider_names(network)]
    refusal = f"job={job_id}: not bidding: its data is not readable here"
    wait_for(
        lambda: all(refusal in log.read_text() for log in logs), 30, "every provider's refusal"
    )
    assert all(f"{stolen} is outside the local data directories" in log.read_text() for log in logs)

    with pytest.raises(NoBids):
        jobs.ChainJob(ledger, user, job_id).wait(auction_timeout=0)
    assert not ledger.market.events.BidCommitted().get_logs(
        from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id}
    )
    assert ledger.market.functions.status(job_id).call() == JobStatus.CANCELLED
    assert ledger.balance(user.address) == before


def test_withholder_and_copier_are_slashed_and_honest_successors_paid_to_the_wei(network):
    ledger, user = network.ledger, network.user
    providers = [network.state.accounts[name] for name in provider_names(network)]
    wait_for(lambda: not _running_jobs(ledger), 300, "the providers to be free")
    wait_for(lambda: all(ledger.owed(p) == 0 for p in providers), 120, "earlier payouts")
    specs = {"withheld": small_spec(1), "copied": small_spec(2)}
    with ThreadPoolExecutor(1) as pool:
        # The withholder trains its two units honestly meanwhile.
        trained = pool.submit(_train_two_units, specs["withheld"])
        withholder, copier = network.enlist(WITHHOLDER, COPIER)
        watched = [user.address, *providers]
        before = {a: ledger.balance(a) for a in watched}
        stakes = {p: ledger.staking_account(p)["staked"] for p in providers}
        first_block = ledger.w3.eth.block_number
        with network.storage() as storage:
            withheld = jobs.submit(ledger, user, storage, specs["withheld"], ORDER)
            withholder_bid = network.underbid(withholder, withheld)
            copied = jobs.submit(ledger, user, storage, specs["copied"], ORDER)
            copier_bid = network.underbid(copier, copied)
            network.take((withholder, withholder_bid), (copier, copier_bid))
            unit0, unit1 = trained.result()

            # The withholder serves unit 0, then commits unit 1 under the CID of bytes it serves
            # nowhere.
            cid0 = storage.add_bytes(unit0.checkpoint.to_bytes())
            storage.pin(cid0, replicas=3)
            hash0 = bytes.fromhex(unit0.state_hash)
            ledger.commit_checkpoint(withholder, withheld, 0, cid0, hash0)
            hidden = cid_of_bytes(unit1.checkpoint.to_bytes())
            ledger.commit_checkpoint(
                withholder, withheld, 0, hidden, bytes.fromhex(unit1.state_hash)
            )
            # The copier commits the withholder's unit 0 as unit 0 of its own job: a checkpoint
            # that is served and holds the state committed, of someone else's job.
            ledger.commit_checkpoint(copier, copied, 0, cid0, hash0)

    # A keeper closes the other job's auction rounds and settles it meanwhile, from its own
    # account and connection, so the two waits send no transaction from one account at once.
    keeper = devnet_account(KEEPER)
    ledger.w3.provider.make_request("anvil_setBalance", [keeper.address, hex(10**18)])
    other = Ledger(Web3(Web3.HTTPProvider(network.state.rpc_url)), ledger.deployment)
    with ThreadPoolExecutor(1) as pool:
        keeping = pool.submit(jobs.ChainJob(other, keeper, copied).wait)
        jobs.ChainJob(ledger, user, withheld).wait()
        keeping.result()

    market = ledger.market.functions
    for job_id, cheater, index in ((withheld, withholder, 1), (copied, copier, 0)):
        # The cheater's unit failed, a second verifier confirmed it, the cheater was slashed.
        assert _events(ledger.market, "UnitRejected", first_block, jobId=job_id, index=index)
        resolved = _events(
            ledger.verification, "DisputeResolved", first_block, jobId=job_id, index=index
        )
        assert resolved and all(e["args"]["confirmed"] for e in resolved)
        assert _events(ledger.staking, "Slashed", first_block, account=cheater.address)
        assert ledger.slot(job_id, 0)["provider"] != cheater.address
        # An honest provider took the slot over and finished it from the last good checkpoint:
        # the job's result is the one an honest run reaches.
        (last,) = jobs.latest_units(ledger, job_id)
        assert last["provider"] in providers
        assert bytes(last["stateHash"]).hex() == honest_state(
            specs["withheld" if job_id == withheld else "copied"]
        )
    # The withholder keeps the pay of the unit it served, the copier nothing.
    (served,) = [
        e["args"]
        for e in ledger.checkpoint_events(withheld)
        if e["args"]["provider"] == withholder.address and e["args"]["index"] == 0
    ]
    assert market.earned(withheld, withholder.address).call() == served["amount"] > 0
    assert market.earned(copied, copier.address).call() == 0

    # Honest neighbours unharmed: paid what they earned less the fee, to the wei, never slashed,
    # their stakes whole; the user paid what the settlements say.
    wait_for(lambda: all(ledger.owed(p) == 0 for p in providers), 120, "the providers' payouts")
    after = {a: ledger.balance(a) for a in watched}
    for provider in providers:
        pay = sum(_net(market.earned(j, provider).call()) for j in (withheld, copied))
        assert after[provider] - before[provider] == pay, provider
        assert ledger.staking_account(provider)["staked"] == stakes[provider]
        assert not _events(ledger.staking, "Slashed", first_block, account=provider)
    paid = sum(jobs.ChainJob(ledger, user, j).settlement().payment for j in (withheld, copied))
    assert before[user.address] - after[user.address] == paid

    # The verifiers collect their fees and reporters' shares now, not during a later test.
    verifiers = [s for s in network.state.running() if s.name.startswith("verifier-")]
    for service in verifiers:
        _wait_collected(ledger, network.state.accounts[service.name], Path(service.log), withheld)
        _wait_collected(ledger, network.state.accounts[service.name], Path(service.log), copied)


def _wait_collected(ledger: Ledger, verifier: str, log: Path, job_id: int) -> None:
    """Until the verifier has claimed and withdrawn its fees of the settled job `job_id`."""
    if ledger.verifications_by(job_id, verifier):
        line = f"collected verification fees of job {job_id}"
        wait_for(lambda: line in log.read_text(), 60, line)
    wait_for(lambda: ledger.owed(verifier) == 0, 60, "the verifier's payout")


def _train_two_units(spec_text: str) -> tuple[UnitResult, UnitResult]:
    spec = parse_spec(spec_text)
    unit0 = run_unit(spec, None, unit_shard(spec, 0), unit_steps(spec, 0))
    return unit0, run_unit(spec, unit0.checkpoint, unit_shard(spec, 0), unit_steps(spec, 1))


def _net(pay: int) -> int:
    """A provider's pay after the market's fee."""
    return pay - pay * FEE_BPS // 10_000


def _running_jobs(ledger: Ledger) -> list[int]:
    """Jobs in training: their providers are busy (each trains one slot at a time)."""
    count = ledger.market.functions.jobCount().call()
    status = ledger.market.functions.status
    return [j for j in range(1, count + 1) if status(j).call() == JobStatus.RUNNING]


def _events(contract, name: str, since: int, **filters) -> list:
    """The contract's events `name` since block `since` whose indexed arguments match."""
    return getattr(contract.events, name)().get_logs(from_block=since, argument_filters=filters)

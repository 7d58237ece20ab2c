"""A whole job lifecycle driven step by step on a devnet: the demo, the gas bench and the tests.

Providers here are scripted accounts, not training daemons: they bid fixed prices and commit
checkpoint records of deterministic bytes. Time moves with `evm_increaseTime`, so it needs Anvil.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from eth_account.signers.local import LocalAccount
from web3.logs import DISCARD

from marketplace.chain.anvil import advance_time, mine
from marketplace.chain.deploy import ZEN
from marketplace.chain.ledger import CommittedUnit, Hardware, JobRequest, Ledger
from marketplace.ipfs.importer import only_hash
from marketplace.protocol.terms import Tier


@dataclass(frozen=True)
class Cast:
    """Who plays which role."""

    governor: LocalAccount  # deployer, ZEN distributor, keeper that closes auctions and settles
    user: LocalAccount
    providers: tuple[LocalAccount, ...]
    verifiers: tuple[LocalAccount, ...]


@dataclass(frozen=True)
class Scenario:
    bids: tuple[int, ...] = (60 * ZEN, 70 * ZEN, 80 * ZEN)  # per GPU-hour, one per provider
    nodes: int = 1
    units: int = 10
    unit_gpu_seconds: int = 599  # what a unit is worth; not a whole hour share, so rounding shows
    unit_seconds: int = 600  # what a unit takes the scripted providers
    max_price: int = 100 * ZEN
    budget: int = 5_000 * ZEN
    sample_rate_bps: int = 5_000
    verdict: bool = True  # what the verifiers post on each sampled unit (False opens a dispute)
    checkpoint_interval: int = 3_600
    provider_stake: int = 10_000 * ZEN
    verifier_stake: int = 5_000 * ZEN
    funding: int = 50_000 * ZEN

    def request(self, spec_cid: str) -> JobRequest:
        return JobRequest(
            spec_cid=spec_cid,
            tier=Tier.COMMUNITY,
            nodes=self.nodes,
            units_per_node=self.units,
            checkpoint_interval=self.checkpoint_interval,
            sample_rate_bps=self.sample_rate_bps,
            max_price=self.max_price,
            budget=self.budget,
            unit_gpu_seconds=self.unit_gpu_seconds,
        )


@dataclass
class Outcome:
    job_id: int
    winners: list[str]
    clearing_price: int
    units: list[CommittedUnit] = field(default_factory=list)
    verified: list[tuple[int, int, str]] = field(default_factory=list)  # (slot, index, verifier)
    settlement: dict = field(default_factory=dict)
    gas: dict[str, list[int]] = field(default_factory=dict)

    def record(self, step: str, receipt) -> None:
        self.gas.setdefault(step, []).append(receipt["gasUsed"])


def cid_of_bytes(data: bytes) -> str:
    """The CIDv0 `ipfs add` gives for `data`."""
    return str(only_hash(data))


def checkpoint_bytes(job_id: int, slot: int, index: int) -> bytes:
    """Stand-in checkpoint contents for a scripted provider."""
    return f"job {job_id} slot {slot} unit {index}\n".encode()


def onboard(ledger: Ledger, cast: Cast, scenario: Scenario) -> None:
    """Fund every actor, register and stake providers and verifiers, admit the providers."""
    for account in (cast.user, *cast.providers, *cast.verifiers):
        ledger.transfer(cast.governor, account.address, scenario.funding)
    for i, verifier in enumerate(cast.verifiers):
        ledger.register_verifier(verifier, f"http://127.0.0.1/verifier/{i}")
        ledger.stake(verifier, scenario.verifier_stake)
    for i, provider in enumerate(cast.providers):
        hardware = Hardware("cpu", 0, 0, 1, f"http://127.0.0.1/provider/{i}")
        ledger.register_provider(provider, Tier.COMMUNITY, hardware)
        ledger.stake(provider, scenario.provider_stake)
        benchmark = hashlib.sha256(f"benchmark {provider.address}".encode()).digest()
        ledger.attest_benchmark(cast.verifiers[0], provider.address, benchmark, 100)


def escrow_job(ledger: Ledger, funder: LocalAccount, user: LocalAccount) -> int:
    """A job `user` escrows a default scenario's budget for (`funder` gives it the ZEN), left
    open: what a registry version may name as the job that made it."""
    scenario = Scenario()
    ledger.transfer(funder, user.address, scenario.budget)
    return ledger.create_job(user, scenario.request(cid_of_bytes(b"a job that trains a model")))


def auction(
    ledger: Ledger, cast: Cast, scenario: Scenario, spec_cid: str
) -> tuple[Outcome, dict[str, int]]:
    """Create a job and auction it: every provider bids its scenario price; the outcome so far
    and each winner's slot by address."""
    request = scenario.request(spec_cid)
    market = ledger.market.functions
    ledger.approve(cast.user, ledger.market.address, request.budget)
    receipt = ledger.send(market.createJob(request.as_struct()), cast.user)
    job_id = ledger.market.events.JobCreated().process_receipt(receipt, errors=DISCARD)[0]["args"][
        "jobId"
    ]
    outcome = Outcome(job_id=job_id, winners=[], clearing_price=0)
    outcome.record("createJob", receipt)

    bids = []
    for provider, price in zip(cast.providers, scenario.bids):
        bid = ledger.commit_bid(provider, job_id, price)
        bids.append((provider, bid))
    outcome.gas["commitBid"] = [
        ledger.w3.eth.get_transaction_receipt(tx)["gasUsed"]
        for tx in _bid_txs(ledger, job_id, "BidCommitted")
    ]
    advance_time(ledger.w3, ledger.market.functions.bidWindow().call() + 1)
    for provider, bid in bids:
        outcome.record("revealBid", ledger.reveal_bid(provider, bid))
    advance_time(ledger.w3, ledger.market.functions.revealWindow().call() + 1)
    receipt = ledger.close_auction(cast.governor, job_id)
    outcome.record("closeAuction", receipt)
    cleared = ledger.market.events.AuctionCleared().process_receipt(receipt, errors=DISCARD)[0][
        "args"
    ]
    outcome.clearing_price = cleared["clearingPrice"]
    assigned = ledger.market.events.SlotAssigned().process_receipt(receipt, errors=DISCARD)
    slots = {e["args"]["provider"]: e["args"]["slot"] for e in assigned}
    outcome.winners = list(slots)
    return outcome, slots


def run_job(
    ledger: Ledger, cast: Cast, scenario: Scenario, spec_cid: str, *, settle: bool = True
) -> Outcome:
    """Create a job, auction it, commit every unit, verify the sampled ones, then (unless told
    not to) settle and withdraw."""
    outcome, slots = auction(ledger, cast, scenario, spec_cid)
    job_id, market = outcome.job_id, ledger.market.functions
    by_address = {p.address: p for p in cast.providers}
    for index in range(scenario.units):
        advance_time(ledger.w3, scenario.unit_seconds)
        batch = []
        for address, slot in slots.items():
            cid = cid_of_bytes(checkpoint_bytes(job_id, slot, index))
            state_hash = hashlib.sha256(checkpoint_bytes(job_id, slot, index)).digest()
            fn = market.commitCheckpoint(job_id, slot, index, cid, state_hash)
            receipt = ledger.send(fn, by_address[address])
            outcome.record("commitCheckpoint", receipt)
            event = ledger.market.events.CheckpointCommitted().process_receipt(
                receipt, errors=DISCARD
            )[0]
            batch.append(ledger.unit_from_event(event))
        outcome.units += batch
        verify_sampled(ledger, cast, batch, outcome, scenario.verdict)
    if not settle:
        return outcome

    advance_time(ledger.w3, ledger.verification.functions.verificationWindow().call() + 1)
    receipt = ledger.send(market.settle(job_id), cast.governor)
    outcome.record("settle", receipt)
    outcome.settlement = dict(
        ledger.market.events.JobSettled().process_receipt(receipt, errors=DISCARD)[0]["args"]
    ) | {
        "tx": "0x" + receipt["transactionHash"].hex().removeprefix("0x"),
        "block": receipt["blockNumber"],
    }
    for address in outcome.winners:
        outcome.record("withdraw", ledger.withdraw(by_address[address]))
    for verifier in {v for _, _, v in outcome.verified}:
        account = next(a for a in cast.verifiers if a.address == verifier)
        ledger.claim_verification_fees(account, job_id)
        ledger.withdraw(account)
    return outcome


def verify_sampled(
    ledger: Ledger, cast: Cast, units: list[CommittedUnit], outcome: Outcome, verdict: bool = True
) -> None:
    """Each sampled unit gets `verdict`, posted as soon as its sample is drawn by the first of
    the cast's verifiers the ledger draws for a turn (the chain's clock moves on to that turn);
    a unit whose turns all go to verifiers outside the cast stays unjudged."""
    mine(ledger.w3, 2)  # a unit is sampled by the next block's hash, readable once one more exists
    by_address = {v.address: v for v in cast.verifiers}
    turn_length = ledger.turn_length(dispute=False)
    turns = ledger.verification.functions.TURNS().call()
    for unit in units:
        if not ledger.is_sampled(unit):
            continue
        now = ledger.w3.eth.get_block("latest")["timestamp"]
        first = (now - unit.committed_at) // turn_length
        for turn in range(first, turns):
            verifier = by_address.get(ledger.drawn_verifier(unit, turn))
            if verifier is None:
                continue
            starts = unit.committed_at + turn * turn_length
            if starts > now:
                advance_time(ledger.w3, starts - now)
            outcome.record(
                "postResult",
                ledger.post_result(
                    verifier, unit, verdict, cid_of_bytes(b"pass" if verdict else b"fail")
                ),
            )
            outcome.verified.append((unit.slot, unit.index, verifier.address))
            break


def _bid_txs(ledger: Ledger, job_id: int, event: str) -> list[bytes]:
    logs = getattr(ledger.market.events, event)().get_logs(
        from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id}
    )
    return [log["transactionHash"] for log in logs]

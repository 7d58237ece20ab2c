"""A role-oriented client of the deployed ledger: what users, providers and verifiers call."""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass

from eth_account.signers.local import LocalAccount
from eth_utils import keccak
from web3 import Web3
from web3.contract import Contract
from web3.contract.contract import ContractFunction
from web3.logs import DISCARD
from web3.types import BlockIdentifier, EventData, TxReceipt

from marketplace.chain.deploy import Deployment
from marketplace.chain.errors import ChainError
from marketplace.chain.tx import call, send
from marketplace.protocol.round_signatures import SlotEvent, Tenure, slot_tenures
from marketplace.protocol.terms import DEFAULT_UNIT_GPU_SECONDS, Verdict

ZERO_ADDRESS = "0x" + "00" * 20


@dataclass(frozen=True)
class JobRequest:
    spec_cid: str
    tier: int
    nodes: int
    units_per_node: int
    checkpoint_interval: int  # seconds
    sample_rate_bps: int
    max_price: int  # ZEN wei per GPU-hour
    budget: int  # ZEN wei
    # what one unit is worth: a unit pays the clearing price x this / 3600, whatever the hardware
    unit_gpu_seconds: int = DEFAULT_UNIT_GPU_SECONDS

    def unit_pay(self, price: int) -> int:
        """What one unit pays at `price` ZEN wei per GPU-hour, as the market computes it."""
        return unit_pay(price, self.unit_gpu_seconds)

    def as_struct(self) -> tuple:
        return (
            self.spec_cid,
            self.tier,
            self.nodes,
            self.units_per_node,
            self.checkpoint_interval,
            self.sample_rate_bps,
            self.max_price,
            self.budget,
            self.unit_gpu_seconds,
        )


def unit_pay(price: int, unit_gpu_seconds: int) -> int:
    """The pay of one unit worth `unit_gpu_seconds` at `price` per GPU-hour, before the budget
    cap: rounded down, as JobMarket does."""
    return price * unit_gpu_seconds // 3600


@dataclass(frozen=True)
class PendingDispute:
    """An open dispute or bandwidth complaint of a job: what it is, when its window ends (chain
    time), and the call that expires it after that."""

    key: str  # names it among the job's: "unit:<slot>:<index>" or "bandwidth:<provider>"
    what: str
    ends_at: int
    expire: ContractFunction


@dataclass(frozen=True)
class Hardware:
    gpu_model: str
    gpus: int
    gpu_memory_gb: int
    network_gbps: int
    endpoint: str
    attestation: bytes = bytes(32)

    def as_struct(self) -> tuple:
        return (
            self.gpu_model,
            self.gpus,
            self.gpu_memory_gb,
            self.network_gbps,
            self.endpoint,
            self.attestation,
        )


@dataclass(frozen=True)
class SealedBid:
    job_id: int
    price: int
    salt: bytes
    commitment: bytes


@dataclass(frozen=True)
class CommittedUnit:
    """A work unit as the market hashed it, rebuilt from its CheckpointCommitted event."""

    job_id: int
    slot: int
    index: int
    provider: str
    cid: str
    state_hash: bytes
    gpu_seconds: int  # the reference GPU-seconds it is paid for: the job's unit worth
    amount: int
    remaining_before: int
    committed_at: int
    block_number: int

    def as_struct(self) -> tuple:
        return (
            self.provider,
            self.committed_at,
            self.block_number,
            self.amount,
            self.remaining_before,
            keccak(text=self.cid),
            self.state_hash,
        )


# (deadline, v, r, s): a signed permit, as *WithPermit takes it
Permit = tuple[int, int, bytes, bytes]


class Ledger:
    """The deployed contracts on one chain, with one method per ledger action."""

    def __init__(self, w3: Web3, deployment: Deployment):
        self.w3 = w3
        self.deployment = deployment
        self.zen = deployment.contract(w3, "ZenToken")
        self.treasury = deployment.contract(w3, "Treasury")
        self.staking = deployment.contract(w3, "Staking")
        self.market = deployment.contract(w3, "JobMarket")
        self.verification = deployment.contract(w3, "Verification")

    def send(self, fn, account: LocalAccount) -> TxReceipt:
        return send(self.w3, fn, account)

    def struct(
        self, contract: Contract, fn_name: str, *args, block: BlockIdentifier | None = None
    ) -> dict:
        """Call a view that returns one struct and name its values by the ABI's field names: read by
        name, a field added to or moved in the contract shifts none of the ones a caller reads."""
        (output,) = next(
            i["outputs"]
            for i in contract.abi
            if i.get("name") == fn_name and i["type"] == "function"
        )
        values = call(getattr(contract.functions, fn_name)(*args), block)
        return dict(zip((c["name"] for c in output["components"]), values, strict=True))

    # --- ZEN -----------------------------------------------------------------------------

    def balance(self, address: str, block: BlockIdentifier | None = None) -> int:
        return call(self.zen.functions.balanceOf(address), block)

    def transfer(self, sender: LocalAccount, to: str, amount: int) -> TxReceipt:
        return self.send(self.zen.functions.transfer(to, amount), sender)

    def approve(self, owner: LocalAccount, spender: str, amount: int) -> TxReceipt:
        return self.send(self.zen.functions.approve(spender, amount), owner)

    # --- staking -------------------------------------------------------------------------

    def register_provider(self, provider: LocalAccount, tier: int, hardware: Hardware) -> TxReceipt:
        return self.send(self.register_provider_call(tier, hardware), provider)

    def register_provider_call(self, tier: int, hardware: Hardware) -> ContractFunction:
        return self.staking.functions.registerProvider(tier, hardware.as_struct())

    def register_verifier(self, verifier: LocalAccount, endpoint: str) -> TxReceipt:
        return self.send(self.register_verifier_call(endpoint), verifier)

    def register_verifier_call(self, endpoint: str) -> ContractFunction:
        return self.staking.functions.registerVerifier(endpoint)

    def stake(self, account: LocalAccount, amount: int) -> TxReceipt:
        self.approve(account, self.staking.address, amount)
        return self.send(self.stake_call(amount), account)

    def stake_call(self, amount: int, permit: Permit | None = None) -> ContractFunction:
        """stake after an approve, or stakeWithPermit with a signed permit: one transaction."""
        staking = self.staking.functions
        return staking.stake(amount) if permit is None else staking.stakeWithPermit(amount, *permit)

    def request_unstake_call(self, amount: int) -> ContractFunction:
        return self.staking.functions.requestUnstake(amount)

    def withdraw_stake_call(self) -> ContractFunction:
        return self.staking.functions.withdraw()

    def attest_benchmark_call(
        self, provider: str, result_hash: bytes, score: int
    ) -> ContractFunction:
        return self.staking.functions.attestBenchmark(provider, result_hash, score)

    def attest_benchmark(
        self, verifier: LocalAccount, provider: str, result_hash: bytes, score: int
    ):
        return self.send(self.attest_benchmark_call(provider, result_hash, score), verifier)

    def staking_account(self, address: str, block: BlockIdentifier | None = None) -> dict:
        return self.struct(self.staking, "account", address, block=block)

    def is_active_verifier(self, address: str) -> bool:
        """Whether `address` is a registered verifier staked at least the minimum: the ledger
        takes no verdict from any other, even one drawn on its stake at a unit's seed."""
        return call(self.staking.functions.isActiveVerifier(address))

    def free_stake(self, address: str) -> int:
        """Stake `address` could lock as new collateral now."""
        return self.staking.functions.freeStake(address).call()

    def hardware(self, provider: str) -> dict:
        """The hardware a provider registered, its endpoint included."""
        return self.struct(self.staking, "hardware", provider)

    def tiers(self) -> list[dict]:
        """Every tier by id, as governance set them."""
        count = call(self.staking.functions.tierCount())
        return [self.struct(self.staking, "tier", i) for i in range(count)]

    # --- jobs and auctions ---------------------------------------------------------------

    def fee_bps(self) -> int:
        """The market's network fee, in basis points."""
        return call(self.market.functions.feeBps())

    def create_job(self, user: LocalAccount, request: JobRequest) -> int:
        self.approve(user, self.market.address, request.budget)
        (job_id,) = self.created_jobs(self.send(self.create_job_call(request), user))
        return job_id

    def create_job_call(
        self, request: JobRequest, permit: Permit | None = None
    ) -> ContractFunction:
        """createJob after an approve, or createJobWithPermit with a signed permit: one
        transaction."""
        market = self.market.functions
        if permit is None:
            return market.createJob(request.as_struct())
        return market.createJobWithPermit(request.as_struct(), *permit)

    def created_jobs(self, receipt: TxReceipt) -> list[int]:
        """The ids of the jobs a mined transaction created (its JobCreated events)."""
        events = self.market.events.JobCreated().process_receipt(receipt, errors=DISCARD)
        return [e["args"]["jobId"] for e in events]

    def job_status(self, job_id: int) -> int:
        return call(self.market.functions.status(job_id))

    def cancel_job_call(self, job_id: int) -> ContractFunction:
        return self.market.functions.cancelJob(job_id)

    def commit_bid(self, provider: LocalAccount, job_id: int, price: int) -> SealedBid:
        """Commit a sealed bid; keep the returned salt secret until the reveal."""
        salt = secrets.token_bytes(32)
        commitment = self.bid_commitment_of(price, salt, provider.address, job_id)
        self.send(self.commit_bid_call(job_id, commitment), provider)
        return SealedBid(job_id, price, salt, commitment)

    def bid_commitment_of(self, price: int, salt: bytes, bidder: str, job_id: int) -> bytes:
        """The sealed commitment of a bid, hashed exactly as the market checks it at the reveal."""
        return call(self.market.functions.bidCommitmentOf(price, salt, bidder, job_id))

    def bid_commitment(self, job_id: int, provider: str) -> bytes:
        """The commitment the provider holds in the job's current round."""
        return call(self.market.functions.bidCommitment(job_id, provider))

    def commit_bid_call(self, job_id: int, commitment: bytes) -> ContractFunction:
        return self.market.functions.commitBid(job_id, commitment)

    def reveal_bid(self, provider: LocalAccount, bid: SealedBid) -> TxReceipt:
        return self.send(self.reveal_bid_call(bid.job_id, bid.price, bid.salt), provider)

    def reveal_bid_call(self, job_id: int, price: int, salt: bytes) -> ContractFunction:
        return self.market.functions.revealBid(job_id, price, salt)

    def close_auction(self, account: LocalAccount, job_id: int) -> TxReceipt:
        return self.send(self.close_auction_call(job_id), account)

    def close_auction_call(self, job_id: int) -> ContractFunction:
        return self.market.functions.closeAuction(job_id)

    def expire_bid_call(self, job_id: int, round_: int, bidder: str) -> ContractFunction:
        """Release the collateral of `bidder`'s sealed bid left unrevealed in `round_`, forfeiting
        its bond unless the round ended early (the caller is paid the reporter's share)."""
        return self.market.functions.expireBid(job_id, round_, bidder)

    def participant(self, job_id: int, provider: str) -> dict:
        """The provider's part in the job's auction (its state: none, committed, revealed,
        won...)."""
        return self.struct(self.market, "participant", job_id, provider)

    def job(self, job_id: int) -> dict:
        """The job as stored, plus its spec CID (which only the JobCreated event carries)."""
        return self.struct(self.market, "job", job_id) | {"specCid": self.spec_cid(job_id)}

    @functools.cache  # noqa: B019 - a ledger lives as long as its process; a job's spec never changes
    def spec_cid(self, job_id: int) -> str:
        logs = self.market.events.JobCreated().get_logs(
            from_block=self.deployment.deploy_block, argument_filters={"jobId": job_id}
        )
        if not logs:
            raise ChainError(f"job {job_id} does not exist")
        return logs[0]["args"]["specCid"]

    def forget_specs(self) -> None:
        """Forget the spec CIDs read by job id: after a reorg a job id may name another job."""
        self.spec_cid.cache_clear()

    def slot(self, job_id: int, slot: int) -> dict:
        return self.struct(self.market, "slot", job_id, slot)

    def checkpoint_deadline(self, job_id: int, slot: int) -> int:
        """When the slot is late without its next unit (unix seconds, the chain's clock)."""
        return call(self.market.functions.checkpointDeadline(job_id, slot))

    # --- work and verification -----------------------------------------------------------

    def commit_checkpoint(
        self,
        provider: LocalAccount,
        job_id: int,
        slot: int,
        cid: str,
        state_hash: bytes,
    ) -> CommittedUnit:
        """Commit the slot's next unit, whichever it is now."""
        index = self.slot(job_id, slot)["unitsDone"]
        receipt = self.send(
            self.commit_checkpoint_call(job_id, slot, index, cid, state_hash), provider
        )
        (event,) = self.market.events.CheckpointCommitted().process_receipt(receipt, errors=DISCARD)
        return self.unit_from_event(event)

    def commit_checkpoint_call(
        self, job_id: int, slot: int, index: int, cid: str, state_hash: bytes
    ) -> ContractFunction:
        """Commit unit `index` of the slot: refused unless it is the slot's next, so a commit
        racing a rollback of the slot cannot land as an earlier unit."""
        return self.market.functions.commitCheckpoint(job_id, slot, index, cid, state_hash)

    def checkpoint_events(self, job_id: int, slot: int | None = None) -> list[EventData]:
        """The job's CheckpointCommitted events (of one slot if given), oldest first."""
        filters = {"jobId": job_id} if slot is None else {"jobId": job_id, "slot": slot}
        return self.market.events.CheckpointCommitted().get_logs(
            from_block=self.deployment.deploy_block, argument_filters=filters
        )

    def slot_tenures(self, job_id: int, slots: int) -> list[dict[str, Tenure]]:
        """By slot of a group job, every provider it was assigned to (lower case) -> the units
        whose exchanges it could have signed for the slot (`round_signatures.slot_tenures`),
        from one read of each event kind for the whole job."""
        events = self.market.events
        start, filters = self.deployment.deploy_block, {"jobId": job_id}

        def logs(event) -> list[EventData]:
            return event().get_logs(from_block=start, argument_filters=filters)

        commits = self.checkpoint_events(job_id)
        found = [
            (event, SlotEvent("assigned", event["args"]["provider"]))
            for event in logs(events.SlotAssigned)
        ]
        found += [
            (event, SlotEvent("committed", event["args"]["provider"], event["args"]["index"]))
            for event in commits
        ]
        found += [
            (event, SlotEvent("rejected", "", event["args"]["index"]))
            for event in logs(events.UnitRejected)
        ]
        found += [
            (event, SlotEvent("left", event["args"]["provider"], 0, event["blockNumber"]))
            for kind in (events.ProviderRemoved, events.SlotReleased)
            for event in logs(kind)
        ]
        first = {"left": -1, "assigned": 0}  # within a block (`slot_tenures`)
        found.sort(key=lambda e: (e[0]["blockNumber"], first.get(e[1].kind, 1), e[0]["logIndex"]))
        first_commits: dict[int, int] = {}
        for event in commits:
            first_commits.setdefault(event["args"]["index"], event["blockNumber"])
        return [
            slot_tenures(
                (slot_event for event, slot_event in found if event["args"]["slot"] == slot),
                first_commits,
            )
            for slot in range(slots)
        ]

    def unit_from_event(self, event) -> CommittedUnit:
        args = event["args"]
        block = self.w3.eth.get_block(event["blockNumber"])
        return CommittedUnit(
            job_id=args["jobId"],
            slot=args["slot"],
            index=args["index"],
            provider=args["provider"],
            cid=args["cid"],
            state_hash=bytes(args["stateHash"]),
            gpu_seconds=args["gpuSeconds"],
            amount=args["amount"],
            remaining_before=args["remainingBefore"],
            committed_at=block["timestamp"],
            block_number=event["blockNumber"],
        )

    def committed_unit(self, job_id: int, slot: int, index: int) -> CommittedUnit | None:
        """The slot's live commitment of unit `index` (its latest: a rolled-back unit is committed
        again over the rejected one); None while there is none."""
        events = [e for e in self.checkpoint_events(job_id, slot) if e["args"]["index"] == index]
        return self.unit_from_event(events[-1]) if events else None

    def flag_unit(self, provider: LocalAccount, unit: CommittedUnit):
        """Have verifiers re-run `unit` whatever its sample: a rank the group's aggregation
        excluded, or a unit whose checkpoint a successor found bad."""
        return self.send(self.flag_unit_call(unit), provider)

    def flag_unit_call(self, unit: CommittedUnit) -> ContractFunction:
        return self.verification.functions.flagUnit(
            unit.job_id, unit.slot, unit.index, unit.as_struct()
        )

    def is_sampled(self, unit: CommittedUnit) -> bool:
        fn = self.verification.functions.isSampled(
            unit.job_id, unit.slot, unit.index, unit.block_number
        )
        return call(fn)

    def recorded_seed(self, block_number: int) -> bytes:
        """The sampling seed recorded on-chain for units of block `block_number`; zeros while
        none is."""
        return bytes(call(self.verification.functions.recordedSeed(block_number)))

    def record_seed_call(self, block_number: int) -> ContractFunction:
        """Keep the sample of block `block_number`'s units past the EVM's 256-block memory: a
        seed nobody records in time is lost, and its units count as not sampled."""
        return self.verification.functions.recordSeed(block_number)

    def result_turns(self, unit: CommittedUnit, verifier: str, now: int) -> list[int]:
        """When (chain time) each turn of `unit`'s verification window starts for which
        `verifier` is drawn to post its result, from the turn running at `now` on: the ledger
        takes its result in these turns only."""
        window = self.verification_window()
        opens_at = self.result_window_opens_at(unit)
        # A result is taken strictly before the window ends.
        return self._drawn_turns(unit, verifier, now, opens_at, window - 1, ZERO_ADDRESS)

    def result_window_opens_at(self, unit: CommittedUnit) -> int:
        """When `unit`'s verification window opens (chain time): at its commitment, or when the
        successor that must resume from it flagged it, which opens it again."""
        fn = self.verification.functions.resultWindowOpensAt(
            unit.job_id, unit.slot, unit.index, unit.as_struct()
        )
        return call(fn)

    def dispute_turns(self, unit: CommittedUnit, verifier: str, now: int) -> list[int]:
        """When (chain time) each turn of the open dispute on `unit` starts for which `verifier`
        is drawn to settle it, from the turn running at `now` on: the ledger takes its answer in
        these turns only."""
        result = self.verification_result(unit.job_id, unit.slot, unit.index)
        # A dispute is answered until its window's last second included.
        ends = self.dispute_window()
        return self._drawn_turns(unit, verifier, now, result["disputedAt"], ends, result["first"])

    def _drawn_turns(
        self,
        unit: CommittedUnit,
        verifier: str,
        now: int,
        opened_at: int,
        last_second: int,
        challenger: str,
    ) -> list[int]:
        """The starts of the turns of a window opened at `opened_at`, whose answers are taken up
        to `last_second` after it, from the one running at `now` on, for which `verifier` is
        drawn."""
        length = self.turn_length(dispute=challenger != ZERO_ADDRESS)
        first, last = max(now - opened_at, 0) // length, last_second // length
        return [
            opened_at + turn * length
            for turn in range(first, last + 1)
            if self.drawn_verifier(unit, turn, challenger) == verifier
        ]

    def turn_length(self, dispute: bool) -> int:
        """Seconds in one turn of a unit's verification window, or of a dispute's window."""
        return call(self.verification.functions.turnLength(dispute))

    def drawn_verifier(self, unit: CommittedUnit, turn: int, challenger: str = ZERO_ADDRESS) -> str:
        """Who the ledger draws, by stake, to judge `unit` in `turn`: its result, or the dispute
        `challenger` opened on it. The zero address when no verifier is eligible."""
        fn = self.verification.functions.drawnVerifier(
            unit.job_id, unit.slot, unit.index, unit.block_number, challenger, turn
        )
        return call(fn)

    def post_result(
        self, verifier: LocalAccount, unit: CommittedUnit, passed: bool, evidence_cid: str
    ):
        return self.send(self.post_result_call(unit, passed, evidence_cid), verifier)

    def post_result_call(
        self, unit: CommittedUnit, passed: bool, evidence_cid: str
    ) -> ContractFunction:
        """A sampled unit's first verdict."""
        return self.verification.functions.postResult(
            unit.job_id, unit.slot, unit.index, unit.as_struct(), passed, evidence_cid
        )

    def resolve_dispute(
        self, verifier: LocalAccount, unit: CommittedUnit, passed: bool, evidence_cid: str
    ):
        return self.send(self.resolve_dispute_call(unit, passed, evidence_cid), verifier)

    def resolve_dispute_call(
        self, unit: CommittedUnit, passed: bool, evidence_cid: str
    ) -> ContractFunction:
        """The second verifier's verdict on a disputed unit."""
        return self.verification.functions.resolveDispute(
            unit.job_id, unit.slot, unit.index, unit.as_struct(), passed, evidence_cid
        )

    def verification_result(self, job_id: int, slot: int, index: int) -> dict:
        """What verifiers posted on a unit: verdict, who judged, when a dispute opened."""
        return self.struct(self.verification, "result", job_id, slot, index)

    def verification_window(self) -> int:
        """Seconds after a commitment (and after completion, before settlement) for verifiers to
        answer."""
        return call(self.verification.functions.verificationWindow())

    def dispute_window(self) -> int:
        """Seconds after a dispute opens for its second verifier to resolve it."""
        return call(self.verification.functions.disputeWindow())

    def open_disputes(self, job_id: int) -> int:
        return call(self.verification.functions.openDisputes(job_id))

    def pending_disputes(self, job_id: int) -> list[PendingDispute]:
        """The job's disputes and bandwidth complaints still open, each with the time its window
        ends and the call that closes it after that. Settlement waits on every one; anyone may
        expire one whose window is over, so whoever wants the job settled can end the wait."""
        window = self.dispute_window()
        since = {"from_block": self.deployment.deploy_block, "argument_filters": {"jobId": job_id}}
        pending: dict[tuple, PendingDispute] = {}
        for event in self.verification.events.DisputeOpened().get_logs(**since):
            slot, index = event["args"]["slot"], event["args"]["index"]
            result = self.struct(self.verification, "result", job_id, slot, index)
            if result["verdict"] == Verdict.DISPUTED:
                pending[("unit", slot, index)] = PendingDispute(
                    f"unit:{slot}:{index}",
                    f"dispute on slot {slot} unit {index}",
                    result["disputedAt"] + window,
                    self.verification.functions.expireDispute(job_id, slot, index),
                )
        for event in self.verification.events.BandwidthComplaint().get_logs(**since):
            provider = event["args"]["provider"]
            complaint = self.struct(self.verification, "complaint", job_id, provider)
            if int(complaint["challenger"], 16):  # the zero address while none is open
                pending[("bandwidth", provider)] = PendingDispute(
                    f"bandwidth:{provider}",
                    f"bandwidth complaint against {provider}",
                    complaint["openedAt"] + window,
                    self.verification.functions.expireBandwidthComplaint(job_id, provider),
                )
        return sorted(pending.values(), key=lambda d: d.ends_at)

    def verifications_by(self, job_id: int, verifier: str) -> int:
        """How many of the job's units `verifier` judged: its share of the verification fees."""
        return call(self.verification.functions.verificationsBy(job_id, verifier))

    def report_downtime_call(self, job_id: int, slot: int) -> ContractFunction:
        return self.market.functions.reportDowntime(job_id, slot)

    # --- settlement ----------------------------------------------------------------------

    def settle(self, account: LocalAccount, job_id: int) -> dict:
        receipt = self.send(self.settle_call(job_id), account)
        (event,) = self.market.events.JobSettled().process_receipt(receipt, errors=DISCARD)
        return dict(event["args"]) | {
            "tx": receipt["transactionHash"].hex(),
            "block": receipt["blockNumber"],
        }

    def settle_call(self, job_id: int) -> ContractFunction:
        return self.market.functions.settle(job_id)

    def settlement_event(self, job_id: int) -> EventData | None:
        """The job's JobSettled event; None while it is not settled."""
        events = self.market.events.JobSettled().get_logs(
            from_block=self.deployment.deploy_block, argument_filters={"jobId": job_id}
        )
        return events[0] if events else None

    def owed(self, address: str, block: BlockIdentifier | None = None) -> int:
        return call(self.market.functions.owed(address), block)

    def withdraw(self, account: LocalAccount) -> TxReceipt:
        return self.send(self.withdraw_call(), account)

    def withdraw_call(self) -> ContractFunction:
        """The market's pull payment: what it owes the sender (pay, fees, refunds)."""
        return self.market.functions.withdraw()

    def claim_verification_fees(self, verifier: LocalAccount, job_id: int) -> TxReceipt:
        return self.send(self.claim_verification_fees_call(job_id), verifier)

    def claim_verification_fees_call(self, job_id: int) -> ContractFunction:
        """A verifier's share of a settled job's verification fees, credited to what it is owed."""
        return self.market.functions.claimVerificationFees(job_id)

"""A role-oriented client of the deployed ledger: what users, providers and verifiers call."""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from enum import IntEnum

from eth_account.signers.local import LocalAccount
from eth_utils import keccak
from web3 import Web3
from web3.logs import DISCARD
from web3.types import TxReceipt

from marketplace.chain.deploy import Deployment
from marketplace.chain.errors import ChainError
from marketplace.chain.tx import call, send


class JobStatus(IntEnum):
    NONE = 0
    OPEN = 1
    RUNNING = 2
    COMPLETED = 3
    SETTLED = 4
    CANCELLED = 5


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

    def as_struct(self) -> tuple:
        return (self.spec_cid, self.tier, self.nodes, self.units_per_node, self.checkpoint_interval,
                self.sample_rate_bps, self.max_price, self.budget)


@dataclass(frozen=True)
class Hardware:
    gpu_model: str
    gpus: int
    gpu_memory_gb: int
    network_gbps: int
    endpoint: str
    attestation: bytes = bytes(32)

    def as_struct(self) -> tuple:
        return (self.gpu_model, self.gpus, self.gpu_memory_gb, self.network_gbps, self.endpoint,
                self.attestation)


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
    gpu_seconds: int
    amount: int
    remaining_before: int
    committed_at: int
    block_number: int

    def as_struct(self) -> tuple:
        return (self.provider, self.committed_at, self.block_number, self.amount,
                self.remaining_before, keccak(text=self.cid), self.state_hash)


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

    # --- ZEN -----------------------------------------------------------------------------

    def balance(self, address: str) -> int:
        return self.zen.functions.balanceOf(address).call()

    def transfer(self, sender: LocalAccount, to: str, amount: int) -> TxReceipt:
        return self.send(self.zen.functions.transfer(to, amount), sender)

    def approve(self, owner: LocalAccount, spender: str, amount: int) -> TxReceipt:
        return self.send(self.zen.functions.approve(spender, amount), owner)

    # --- staking -------------------------------------------------------------------------

    def register_provider(self, provider: LocalAccount, tier: int, hardware: Hardware) -> TxReceipt:
        return self.send(self.staking.functions.registerProvider(tier, hardware.as_struct()), provider)

    def register_verifier(self, verifier: LocalAccount, endpoint: str) -> TxReceipt:
        return self.send(self.staking.functions.registerVerifier(endpoint), verifier)

    def stake(self, account: LocalAccount, amount: int) -> TxReceipt:
        self.approve(account, self.staking.address, amount)
        return self.send(self.staking.functions.stake(amount), account)

    def attest_benchmark(self, verifier: LocalAccount, provider: str, result_hash: bytes, score: int):
        return self.send(self.staking.functions.attestBenchmark(provider, result_hash, score), verifier)

    def staking_account(self, address: str) -> dict:
        role, tier, admitted, gpus, unbonding_ends, staked, locked, unbonding = (
            self.staking.functions.account(address).call()
        )
        return {"role": role, "tier": tier, "admitted": admitted, "gpus": gpus,
                "unbonding_ends": unbonding_ends, "staked": staked, "locked": locked,
                "unbonding": unbonding}

    # --- jobs and auctions ---------------------------------------------------------------

    def create_job(self, user: LocalAccount, request: JobRequest) -> int:
        self.approve(user, self.market.address, request.budget)
        receipt = self.send(self.market.functions.createJob(request.as_struct()), user)
        (event,) = self.market.events.JobCreated().process_receipt(receipt, errors=DISCARD)
        return event["args"]["jobId"]

    def commit_bid(self, provider: LocalAccount, job_id: int, price: int) -> SealedBid:
        """Commit a sealed bid; keep the returned salt secret until the reveal."""
        salt = secrets.token_bytes(32)
        commitment = call(self.market.functions.bidCommitmentOf(price, salt, provider.address, job_id))
        self.send(self.market.functions.commitBid(job_id, commitment), provider)
        return SealedBid(job_id, price, salt, commitment)

    def reveal_bid(self, provider: LocalAccount, bid: SealedBid) -> TxReceipt:
        return self.send(self.market.functions.revealBid(bid.job_id, bid.price, bid.salt), provider)

    def close_auction(self, account: LocalAccount, job_id: int) -> TxReceipt:
        return self.send(self.market.functions.closeAuction(job_id), account)

    def job(self, job_id: int) -> dict:
        """The job as stored, plus its spec CID (which only the JobCreated event carries)."""
        values = call(self.market.functions.job(job_id))
        names = [o["name"] for o in self._abi_outputs(self.market, "job")[0]["components"]]
        return dict(zip(names, values)) | {"specCid": self.spec_cid(job_id)}

    @functools.cache  # noqa: B019 - a ledger lives as long as its process; job specs never change
    def spec_cid(self, job_id: int) -> str:
        logs = self.market.events.JobCreated().get_logs(
            from_block=self.deployment.deploy_block, argument_filters={"jobId": job_id}
        )
        if not logs:
            raise ChainError(f"job {job_id} does not exist")
        return logs[0]["args"]["specCid"]

    def slot(self, job_id: int, slot: int) -> dict:
        values = call(self.market.functions.slot(job_id, slot))
        names = [o["name"] for o in self._abi_outputs(self.market, "slot")[0]["components"]]
        return dict(zip(names, values))

    @staticmethod
    def _abi_outputs(contract, fn_name: str) -> list[dict]:
        return next(i["outputs"] for i in contract.abi if i.get("name") == fn_name and i["type"] == "function")

    # --- work and verification -----------------------------------------------------------

    def commit_checkpoint(
        self, provider: LocalAccount, job_id: int, slot: int, gpu_seconds: int, cid: str, state_hash: bytes
    ) -> CommittedUnit:
        fn = self.market.functions.commitCheckpoint(job_id, slot, gpu_seconds, cid, state_hash)
        receipt = self.send(fn, provider)
        (event,) = self.market.events.CheckpointCommitted().process_receipt(receipt, errors=DISCARD)
        return self.unit_from_event(event)

    def unit_from_event(self, event) -> CommittedUnit:
        args = event["args"]
        block = self.w3.eth.get_block(event["blockNumber"])
        return CommittedUnit(
            job_id=args["jobId"], slot=args["slot"], index=args["index"], provider=args["provider"],
            cid=args["cid"], state_hash=bytes(args["stateHash"]), gpu_seconds=args["gpuSeconds"],
            amount=args["amount"], remaining_before=args["remainingBefore"],
            committed_at=block["timestamp"], block_number=event["blockNumber"],
        )

    def committed_unit(self, job_id: int, slot: int, index: int) -> CommittedUnit | None:
        """The slot's live commitment of unit `index` (its latest: a rolled-back unit is committed
        again over the rejected one); None while there is none."""
        events = [e for e in self.market.events.CheckpointCommitted().get_logs(
            from_block=self.deployment.deploy_block, argument_filters={"jobId": job_id, "slot": slot},
        ) if e["args"]["index"] == index]
        return self.unit_from_event(events[-1]) if events else None

    def flag_unit(self, provider: LocalAccount, unit: CommittedUnit):
        """Have verifiers re-run `unit` whatever its sample: a rank the group's aggregation excluded."""
        fn = self.verification.functions.flagUnit(unit.job_id, unit.slot, unit.index, unit.as_struct())
        return self.send(fn, provider)

    def is_sampled(self, unit: CommittedUnit) -> bool:
        fn = self.verification.functions.isSampled(unit.job_id, unit.slot, unit.index, unit.block_number)
        return call(fn)

    def post_result(self, verifier: LocalAccount, unit: CommittedUnit, passed: bool, evidence_cid: str):
        fn = self.verification.functions.postResult(
            unit.job_id, unit.slot, unit.index, unit.as_struct(), passed, evidence_cid
        )
        return self.send(fn, verifier)

    def resolve_dispute(self, verifier: LocalAccount, unit: CommittedUnit, passed: bool, evidence_cid: str):
        fn = self.verification.functions.resolveDispute(
            unit.job_id, unit.slot, unit.index, unit.as_struct(), passed, evidence_cid
        )
        return self.send(fn, verifier)

    # --- settlement ----------------------------------------------------------------------

    def settle(self, account: LocalAccount, job_id: int) -> dict:
        receipt = self.send(self.market.functions.settle(job_id), account)
        (event,) = self.market.events.JobSettled().process_receipt(receipt, errors=DISCARD)
        return dict(event["args"]) | {"tx": receipt["transactionHash"].hex(), "block": receipt["blockNumber"]}

    def owed(self, address: str) -> int:
        return self.market.functions.owed(address).call()

    def withdraw(self, account: LocalAccount) -> TxReceipt:
        return self.send(self.market.functions.withdraw(), account)

    def claim_verification_fees(self, verifier: LocalAccount, job_id: int) -> TxReceipt:
        return self.send(self.market.functions.claimVerificationFees(job_id), verifier)

    # --- devnet time ---------------------------------------------------------------------

    def advance_time(self, seconds: int) -> None:
        """Move a devnet's clock forward and mine a block (Anvil and Hardhat only)."""
        self.w3.provider.make_request("evm_increaseTime", [seconds])
        self.w3.provider.make_request("evm_mine", [])

    def mine(self, blocks: int = 1) -> None:
        for _ in range(blocks):
            self.w3.provider.make_request("evm_mine", [])

"""Transactions the user signs: built unsigned for a wallet the gateway never holds, then taken back
signed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path
from hexbytes import HexBytes
from web3 import Web3
from web3.contract.contract import ContractFunction
from web3.exceptions import TransactionNotFound

from marketplace import jobs
from marketplace.chain import tx
from marketplace.chain.ledger import Hardware, Ledger, Permit
from marketplace.chain.permit import permit_typed_data, split_signature
from marketplace.chain.registry import Reference, Registry
from marketplace.chain.zen import rounded
from marketplace.gateway.api.deps import JobId, LedgerDep, StorageDep
from marketplace.gateway.api.schemas import (
    NOT_FOUND,
    REFUSED,
    Broadcast,
    JobOrderRequest,
    PermitOut,
    PermitRequest,
    PermitSignature,
    ProviderRegistration,
    RegistryPublication,
    SenderRequest,
    SignedTransaction,
    StakeRequest,
    TransactionStatus,
    UnsignedTransaction,
    UnstakeRequest,
    VerifierRegistration,
)
from marketplace.gateway.api.service import UnknownTransaction
from marketplace.gateway.transactions import broadcast, unsigned
from marketplace.protocol.spec import MAX_SPEC_BYTES
from marketplace.protocol.terms import Kind

router = APIRouter(prefix="/transactions", tags=["transactions"])


def builds(path: str, responses: dict = REFUSED, **kwargs: Any) -> Callable[[Callable], Callable]:
    """A route that answers with an unsigned transaction for the sender to sign."""
    return router.post(
        path,
        response_model=UnsignedTransaction,
        response_model_exclude_none=True,
        responses=responses,
        **kwargs,
    )


MAX_REASON_CHARS = 500  # our contracts' sentences are far shorter

TxHash = Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{64}$", description="A transaction hash.")]


@router.post("/permit", response_model=PermitOut, responses=REFUSED)
def permit(body: PermitRequest, ledger: LedgerDep):
    """The ERC-2612 permit (EIP-712 typed data) for the owner to sign: the market's escrow or a
    stake in one transaction."""
    spender = ledger.deployment.addresses[body.spender]
    typed = permit_typed_data(ledger, Web3.to_checksum_address(body.owner), spender, body.value)
    return {"typed_data": typed, "deadline": typed["message"]["deadline"]}


@builds("/jobs", responses=REFUSED | NOT_FOUND)
def create_job(body: JobOrderRequest, ledger: LedgerDep, storage: StorageDep):
    """createJobWithPermit (with the signed permit) or createJob (after an approve) for a spec
    already pinned.

    The spec is read back by its CID to size the job; a budget below the reserve or above the
    sender's ZEN is refused here, before anything is signed.
    """
    sender = Web3.to_checksum_address(body.sender)
    order = jobs.Order(
        max_budget=body.max_budget,
        max_price=body.max_price,
        tier=body.tier,
        nodes=body.nodes,
        sample_rate_bps=body.sample_rate_bps,
        checkpoint_interval=body.checkpoint_interval,
        unit_gpu_seconds=body.unit_gpu_seconds,
    )
    request = jobs.job_request(
        storage.cat(body.spec_cid, max_bytes=MAX_SPEC_BYTES).decode(errors="replace"),
        body.spec_cid,
        order,
    )
    jobs.check_funds(ledger, sender, order.max_budget)
    permit = None if body.permit is None else _permit_args(body.permit)
    return unsigned(ledger, ledger.create_job_call(request, permit), sender)


@builds("/registry")
def publish_version(body: RegistryPublication, ledger: LedgerDep):
    """publish: the next version of a model or dataset name (the sender's, or nobody's yet), its
    content already on IPFS. A license that is not an SPDX id is refused here; a name someone else
    owns, or a parent that does not exist, is the registry's own refusal."""
    registry = Registry(ledger.w3, ledger.deployment)
    call = registry.publish_call(
        Kind.named(body.kind),
        body.name,
        body.cid,
        body.license,
        body.metadata_cid,
        Reference.parse(body.parent) if body.parent else None,
        body.job_id,
    )
    return unsigned(ledger, call, Web3.to_checksum_address(body.sender))


def _permit_args(permit: PermitSignature) -> Permit:
    return permit.deadline, *split_signature(bytes.fromhex(permit.signature[2:]))


def _job_action(
    path: str, function: str, job_call: Callable[[Ledger, int], ContractFunction], summary: str
) -> None:
    """A route building the market's `function(jobId)` for the sender."""

    def build(job_id: JobId, body: SenderRequest, ledger: LedgerDep):
        return unsigned(ledger, job_call(ledger, job_id), Web3.to_checksum_address(body.sender))

    build.__doc__ = summary
    builds(f"/jobs/{{job_id}}/{path}", name=function)(build)


_job_action(
    "cancel",
    "cancelJob",
    Ledger.cancel_job_call,
    "cancelJob: the user takes the whole budget back while no auction has cleared.",
)
_job_action(
    "close-auction",
    "closeAuction",
    Ledger.close_auction_call,
    "closeAuction: end a round whose reveal window is over (the next opens if too few bids came).",
)
_job_action(
    "settle",
    "settle",
    Ledger.settle_call,
    "settle: pay providers, the fee and the refund once the verification window is over.",
)


@builds("/withdraw")
def withdraw(body: SenderRequest, ledger: LedgerDep):
    """withdraw: a provider or verifier takes what the market owes it."""
    return unsigned(ledger, ledger.withdraw_call(), Web3.to_checksum_address(body.sender))


@builds("/providers")
def register_provider(body: ProviderRegistration, ledger: LedgerDep):
    """registerProvider: join a tier with this hardware; active once staked and its benchmark is
    attested."""
    hardware = Hardware(
        body.gpu_model,
        body.gpus,
        body.gpu_memory_gb,
        body.network_gbps,
        body.endpoint,
        bytes.fromhex(body.attestation[2:]),
    )
    call = ledger.register_provider_call(body.tier, hardware)
    return unsigned(ledger, call, Web3.to_checksum_address(body.sender))


@builds("/verifiers")
def register_verifier(body: VerifierRegistration, ledger: LedgerDep):
    """registerVerifier: publish where this verifier is reached; active from the minimum stake."""
    call = ledger.register_verifier_call(body.endpoint)
    return unsigned(ledger, call, Web3.to_checksum_address(body.sender))


@builds("/stake")
def stake(body: StakeRequest, ledger: LedgerDep):
    """stakeWithPermit (with the signed permit, spender Staking) or stake (after an approve).

    More than the sender's ZEN is refused here, before anything is signed.
    """
    sender = Web3.to_checksum_address(body.sender)
    if (held := ledger.balance(sender)) < body.amount:
        raise jobs.InsufficientZen(
            f"wallet {sender} holds {rounded(held)} ZEN, the stake needs {rounded(body.amount)}"
        )
    permit = None if body.permit is None else _permit_args(body.permit)
    return unsigned(ledger, ledger.stake_call(body.amount, permit), sender)


@builds("/unstake")
def unstake(body: UnstakeRequest, ledger: LedgerDep):
    """requestUnstake: move free stake into unbonding; withdraw it after the unbonding delay."""
    call = ledger.request_unstake_call(body.amount)
    return unsigned(ledger, call, Web3.to_checksum_address(body.sender))


@builds("/stake/withdraw")
def withdraw_stake(body: SenderRequest, ledger: LedgerDep):
    """withdraw (Staking): take back unbonded stake once the unbonding delay is over."""
    return unsigned(ledger, ledger.withdraw_stake_call(), Web3.to_checksum_address(body.sender))


@router.post("", response_model=Broadcast, responses=REFUSED)
def send_signed(body: SignedTransaction, ledger: LedgerDep):
    """Broadcast a signed transaction: it must decode, be for this chain and go to a ledger
    contract."""
    tx_hash, fields = broadcast(ledger, bytes.fromhex(body.raw[2:]))
    return {"tx_hash": tx_hash, "sender": fields["sender"], "nonce": fields["nonce"]}


@router.get("/status/{tx_hash}", response_model=TransactionStatus, responses=NOT_FOUND)
def transaction_status(tx_hash: TxHash, ledger: LedgerDep):
    """Whether the transaction is mined and succeeded, the job it created if any, and why it
    reverted if it did."""
    try:
        receipt = ledger.w3.eth.get_transaction_receipt(tx_hash)
    except TransactionNotFound:
        receipt = None
    if receipt is None:
        try:
            ledger.w3.eth.get_transaction(tx_hash)
        except TransactionNotFound:
            raise UnknownTransaction(
                f"transaction {tx_hash} is neither pending nor mined"
            ) from None
        return {
            "tx_hash": tx_hash,
            "status": "pending",
            "block_number": None,
            "gas_used": None,
            "job_id": None,
        }
    created = ledger.created_jobs(receipt)
    reverted = receipt["status"] != 1
    # Only a call to the market's own contracts is replayed for its reason: anyone's transaction
    # could be asked about, and replaying one that burns a block's gas would cost this gateway.
    ours = receipt["to"] in ledger.deployment.addresses.values()
    reason = tx.revert_reason(ledger.w3, receipt["transactionHash"]) if reverted and ours else None
    return {
        "tx_hash": HexBytes(receipt["transactionHash"]).to_0x_hex(),
        "status": "reverted" if reverted else "succeeded",
        "block_number": receipt["blockNumber"],
        "gas_used": receipt["gasUsed"],
        "job_id": created[0] if created else None,
        "error": None if reason is None else str(reason)[:MAX_REASON_CHARS],
    }

"""What the API shows: Public schemas, separate from the database rows. ZEN amounts are wei, as
strings."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

from marketplace.protocol import terms
from marketplace.protocol.spec import MAX_SPEC_BYTES
from marketplace.protocol.text import PRINTABLE

Wei = Annotated[int, PlainSerializer(str, return_type=str, when_used="json")]
# The API names the ledger's job statuses and roles by their labels, not by the ids the chain
# stores.
JobStatus = Literal[terms.JOB_STATUSES]
Role = Literal[terms.Role.labels()]


class Message(BaseModel):
    """Why a request was refused."""

    detail: str


class Revert(Message):
    """Why the ledger would refuse it: its custom error in words, and by name for programs."""

    error: str  # the custom error's name, e.g. "UnbondingNotOver"


def _wei(value):
    """Wei arrive as a JSON integer or, for clients whose numbers are doubles, as a decimal
    string."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,78}", value):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError("a wei amount is an integer or a string of decimal digits")


def _wei_in(minimum: int):
    """A uint256 wei amount of at least `minimum`, as an integer or a decimal string."""
    return Annotated[
        int,
        BeforeValidator(_wei),
        Field(ge=minimum, le=2**256 - 1),
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "integer", "minimum": minimum, "maximum": 2**256 - 1},
                    {"type": "string", "pattern": "^[0-9]{1,78}$"},
                ]
            }
        ),
    ]


WeiIn = _wei_in(0)
PositiveWeiIn = _wei_in(1)  # an amount to move: the ledger refuses 0


class Request(BaseModel):
    """A request body: strict, so a field takes exactly what the OpenAPI says (no "12" for 12)."""

    model_config = ConfigDict(strict=True)


NOT_FOUND = {404: {"model": Message, "description": "Not in the index."}}
SIGNED_IN = {
    401: {"model": Message, "description": "No live Sign-In with Ethereum session."},
    403: {"model": Message, "description": "The signed-in wallet may not write here."},
}
REFUSED = {
    400: {
        "model": Message,
        "description": "Invalid input, or a transaction the gateway will not send.",
    },
    409: {"model": Revert, "description": "The ledger would revert it now (its custom error)."},
}
# What any route may answer: the gateway's bounds on every request.
BOUNDED = {
    413: {
        "description": "The request body is over the gateway's limit.",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    },
    429: {"model": Message, "description": "This address spent its rate limit; see Retry-After."},
}


class Row(BaseModel):
    """Where on the chain a record was read."""

    model_config = ConfigDict(from_attributes=True)
    block_number: int
    tx_hash: str


class BidPublic(Row):
    provider: str
    commitment: str | None
    price: Wei | None  # set on a reveal


class SlotPublic(Row):
    slot: int
    provider: str
    price: Wei | None
    removed_reason: str | None  # set when the provider lost the slot


class SettlementPublic(Row):
    job_id: int
    payment: Wei  # pay for accepted work, fee included
    fee: Wei  # network fee, to the treasury
    refund: Wei  # budget - payment, back to the user
    verifier_pool: Wei  # part of the fee owed to verifiers
    cancelled: bool


class JobPublic(Row):
    job_id: int
    user: str
    tier: int
    spec_cid: str
    nodes: int
    units_per_node: int
    unit_gpu_seconds: int  # what one unit is worth: it pays the clearing price x this / 3600
    max_price: Wei  # per GPU-hour
    budget: Wei
    collateral: Wei
    status: JobStatus
    clearing_price: Wei | None


class JobDetail(JobPublic):
    bids: list[BidPublic]
    slots: list[SlotPublic]
    settlement: SettlementPublic | None


class ResultPublic(Row):
    kind: Literal["result", "dispute", "resolved", "expired"]
    account: str | None
    passed: bool | None
    evidence_cid: str | None


class UnitPublic(Row):
    slot: int
    index: int
    provider: str
    cid: str  # the checkpoint
    state_hash: str
    gpu_seconds: int  # the reference GPU-seconds it is paid for: the job's unit worth
    amount: Wei
    remaining_before: Wei
    results: list[ResultPublic]
    void: bool  # a later rollback voided it: rejected on review, or built on a rejected unit


class SlashPublic(Row):
    account: str
    reason: str
    amount: Wei
    reporter: str
    reporter_share: Wei


class ProviderPublic(Row):
    address: str
    tier: int
    gpu_model: str
    gpus: int
    endpoint: str
    staked: Wei
    locked: Wei
    unbonding: Wei


class ProviderDetail(ProviderPublic):
    jobs: list[int]
    slashes: list[SlashPublic]


class RegistryVersionPublic(Row):
    """One published version of a registry name."""

    kind: Literal["model", "dataset"]
    name: str
    version: int
    cid: str  # the CID of the version's file list
    license: str  # an SPDX license id
    metadata_cid: str | None
    parent: str | None  # "org/name@N": the version it derives from
    job_id: int | None  # the job that made it
    publisher: str


class RegistryNamePublic(BaseModel):
    """A registry name: its owner now and its newest version."""

    kind: Literal["model", "dataset"]
    name: str
    owner: str
    versions: int
    latest: RegistryVersionPublic


class RegistryNameDetail(RegistryNamePublic):
    history: list[RegistryVersionPublic]  # every version, oldest first


class NetworkStats(BaseModel):
    indexed_block: int | None  # the last block the indexer read; None before its first step
    jobs: dict[str, int]  # by status
    providers: int
    escrowed: Wei  # every budget ever escrowed
    paid: Wei
    fees: Wei
    refunded: Wei
    slashed: Wei
    treasury_balance: Wei


class Health(BaseModel):
    status: Literal["ok"]
    indexed_block: int | None


# --- job logs, metrics, result ------------------------------------------------------------


class LogLine(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int  # pass the last one seen as `since` to follow the log
    author: str
    posted_at: int  # unix seconds
    line: str


class LogPost(Request):
    lines: list[Annotated[str, Field(max_length=1024, pattern=PRINTABLE)]] = Field(
        min_length=1, max_length=100
    )


class LogsPosted(BaseModel):
    count: int
    last_id: int


class UnitMetrics(BaseModel):
    """A unit's training figures, from its checkpoint's own metadata; None where not readable."""

    slot: int
    index: int
    cid: str
    start_step: int | None = None
    end_step: int | None = None
    loss: float | None = None
    eval_loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None
    tokens: int | None = None
    seconds: float | None = None
    tokens_per_s: float | None = None
    rollbacks: int | None = None


class JobMetrics(BaseModel):
    status: JobStatus
    units_done: int
    units_total: int
    accrued: Wei  # pay accrued by the committed units, fee included
    loss: float | None  # at the newest checkpoint of slot 0
    units: list[UnitMetrics]


class SlotResultPublic(BaseModel):
    """A slot's last committed unit."""

    slot: int
    index: int
    cid: str
    state_hash: str


class JobResultPublic(Row):
    """The trained model: the last checkpoint of slot 0, as committed on-chain. A group job's
    model is what every rank's last round bundle holds (`slots`), which must agree."""

    job_id: int
    status: JobStatus
    final: bool  # the job has no work left: these are the weights it ends with
    slot: int
    index: int
    cid: str
    state_hash: str
    state_verified: (
        bool | None
    )  # the gateway read the checkpoint and it holds the state hash; None: not readable now
    results: list[ResultPublic]  # verifiers' verdicts on this unit
    nodes: int
    units_per_node: int
    slots: list[SlotResultPublic]  # every slot's last unit, slot 0's first


class TreasuryPublic(BaseModel):
    address: str | None  # None until the indexer has seen the chain
    balance: Wei
    fee_income: Wei  # network fees from settlements
    slash_income: Wei  # the treasury's share of slashes
    other_income: Wei
    grants: Wei  # paid out by governance


class TreasuryTransferPublic(Row):
    counterparty: str
    incoming: bool
    amount: Wei


# --- sessions -----------------------------------------------------------------------------

HEX_SIGNATURE = r"^0x[0-9a-fA-F]{130}$"


class NonceOut(BaseModel):
    nonce: str  # put it in the Sign-In with Ethereum message; it signs in once
    expires_at: int  # unix seconds
    chain_id: int  # the message's Chain ID must be this


class SignInRequest(Request):
    message: str = Field(max_length=4096)  # the EIP-4361 text, as signed
    signature: str = Field(pattern=HEX_SIGNATURE)  # EIP-191 personal_sign of the message


class SessionOut(BaseModel):
    token: str  # send as 'Authorization: Bearer <token>'
    address: str
    expires_at: int


# --- uploads ------------------------------------------------------------------------------


class SpecUpload(Request):
    spec: str = Field(max_length=MAX_SPEC_BYTES)  # the job spec's YAML text, pinned as is


class SpecUploaded(BaseModel):
    cid: str
    name: str
    nodes: int  # the spec's distributed.nodes
    units_per_node: int


class DatasetUploaded(BaseModel):
    cid: str
    size: int


# --- transactions -------------------------------------------------------------------------

ADDRESS_PATTERN = r"^0x[0-9a-fA-F]{40}$"
Address = Annotated[str, Field(pattern=ADDRESS_PATTERN)]


class PermitRequest(Request):
    owner: Address
    spender: Literal["JobMarket", "Staking"]
    value: WeiIn


class PermitOut(BaseModel):
    typed_data: dict  # EIP-712: sign with eth_signTypedData_v4 (or eth_account's sign_typed_data)
    deadline: int


class PermitSignature(Request):
    deadline: int = Field(ge=0, le=2**256 - 1)
    signature: str = Field(pattern=HEX_SIGNATURE)


class JobOrderRequest(Request):
    """A job to escrow: the spec (by CID, uploaded first) and what the user will pay."""

    sender: Address
    spec_cid: str = Field(max_length=200)
    max_budget: WeiIn
    max_price: WeiIn  # per GPU-hour
    tier: int = Field(0, ge=0, le=3)
    nodes: int | None = Field(None, ge=1, le=64)  # default: the spec's
    sample_rate_bps: int = Field(1_000, ge=0, le=10_000)
    checkpoint_interval: int = Field(600, ge=1, le=2**32 - 1)
    # what one unit is worth, in reference GPU-seconds of the tier: it pays price x this / 3600
    unit_gpu_seconds: int = Field(terms.DEFAULT_UNIT_GPU_SECONDS, ge=1, le=2**32 - 1)
    permit: PermitSignature | None = (
        None  # with it, createJobWithPermit; without, createJob (approve first)
    )


class SenderRequest(Request):
    sender: Address


class StakeRequest(Request):
    """ZEN to add to the sender's stake, a provider's or a verifier's."""

    sender: Address
    amount: PositiveWeiIn
    permit: PermitSignature | None = (
        None  # with it, stakeWithPermit; without, stake (approve first)
    )


class UnstakeRequest(Request):
    sender: Address
    amount: PositiveWeiIn  # of the free stake (not locked as collateral), into unbonding


class ProviderRegistration(Request):
    """A provider's tier and hardware, as Staking.registerProvider records them."""

    sender: Address
    tier: int = Field(0, ge=0, le=255)
    gpu_model: str = Field(min_length=1, max_length=100)  # e.g. "H100 80GB", or "cpu"
    gpus: int = Field(0, ge=0, le=2**32 - 1)
    gpu_memory_gb: int = Field(0, ge=0, le=2**32 - 1)  # per GPU
    network_gbps: int = Field(0, ge=0, le=2**32 - 1)
    endpoint: str = Field(
        "", max_length=500
    )  # where a group job's rank 0 hosts the group, e.g. tcp://host:port
    attestation: str = Field(
        pattern=r"^0x[0-9a-fA-F]{64}$"
    )  # sha2-256 digest of the pinned benchmark report


class VerifierRegistration(Request):
    sender: Address
    endpoint: str = Field(
        min_length=1, max_length=500
    )  # where the verifier can be reached, as published


class RegistryPublication(Request):
    """A version to publish to the registry, its content already on IPFS."""

    sender: Address
    kind: Literal["model", "dataset"]
    name: str = Field(max_length=96, pattern=r"^[a-z0-9._-]+/[a-z0-9._-]+$")  # org/name
    cid: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9]+$")
    license: str = Field(min_length=1, max_length=64)  # an SPDX license id
    metadata_cid: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9]+$")
    parent: str | None = Field(
        None, max_length=107, pattern=r"^[a-z0-9._-]+/[a-z0-9._-]+@[1-9][0-9]{0,9}$"
    )  # org/name@N
    job_id: int | None = Field(None, ge=1, le=2**256 - 1)


class UnsignedTransaction(BaseModel):
    """Sign as is (eth_account's sign_transaction, or a wallet's eth_signTransaction), then POST
    /transactions."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)
    sender: str = Field(alias="from")
    to: str
    data: str
    value: int
    gas: int
    nonce: int
    chain_id: int = Field(alias="chainId")
    max_fee_per_gas: int | None = Field(None, alias="maxFeePerGas")
    max_priority_fee_per_gas: int | None = Field(None, alias="maxPriorityFeePerGas")
    gas_price: int | None = Field(None, alias="gasPrice")  # chains without EIP-1559


class SignedTransaction(Request):
    raw: str = Field(pattern=r"^0x([0-9a-fA-F]{2})+$", max_length=262_144)


class Broadcast(BaseModel):
    tx_hash: str
    sender: str
    nonce: int


class TransactionStatus(BaseModel):
    tx_hash: str
    status: Literal["pending", "succeeded", "reverted"]
    block_number: int | None
    gas_used: int | None
    job_id: int | None  # the job it created, if it created one
    error: str | None = None  # why it reverted: the contract's error on the state its block left

"""What the API shows: Public schemas, separate from the database rows. ZEN amounts are wei, as strings."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, PlainSerializer

Wei = Annotated[int, PlainSerializer(str, return_type=str, when_used="json")]
JobStatus = Literal["open", "running", "completed", "settled", "cancelled"]


class Message(BaseModel):
    """Why a request was refused."""

    detail: str


NOT_FOUND = {404: {"model": Message, "description": "Not in the index."}}


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
    gpu_seconds: int
    amount: Wei
    remaining_before: Wei
    results: list[ResultPublic]


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

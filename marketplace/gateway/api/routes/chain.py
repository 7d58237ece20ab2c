"""The chain behind the index, read live from the RPC: the ledger's addresses and ABIs for wallets,
and small views of transactions, blocks and the ledger's own ZEN, so every explorer row can be
checked against the chain rather than trusted."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

import requests
from eth_abi.exceptions import DecodingError
from fastapi import APIRouter, Path, Query
from pydantic import BaseModel
from web3.exceptions import BadFunctionCallOutput, BlockNotFound, TransactionNotFound

from marketplace.chain.decoder import LedgerDecoder
from marketplace.chain.errors import ChainError
from marketplace.chain.ledger import Ledger
from marketplace.gateway.api.deps import AddressDep, LedgerDep
from marketplace.gateway.api.schemas import NOT_FOUND, Message, Role, Wei
from marketplace.gateway.api.service import NotFound
from marketplace.protocol import terms

router = APIRouter(prefix="/chain", tags=["chain"])

WALLET_CONTRACTS = ("ZenToken", "Staking")  # what the staking page calls
HOLDERS = ("JobMarket", "Staking", "Treasury")  # the contracts that hold ZEN
UNAVAILABLE = {503: {"model": Message, "description": "The chain's RPC does not answer."}}


class TierView(BaseModel):
    name: str
    min_stake: Wei


class ChainConfig(BaseModel):
    """What a browser wallet needs to talk to this ledger; it reads the chain through its own
    RPC."""

    chain_id: int
    deploy_block: int
    fee_bps: int  # the market's network fee, in basis points
    tiers: list[TierView]  # by tier id, as governance set them
    addresses: dict[str, str]  # contract name -> address
    abis: dict[str, list[dict[str, Any]]]  # ZenToken and Staking


class LogView(BaseModel):
    log_index: int
    address: str
    contract: str | None  # the ledger contract that emitted it; None for any other
    event: str | None  # None when it is not one of the ledger's events
    args: dict[str, Any]  # integers as decimal strings, bytes as 0x hex


class TxView(BaseModel):
    hash: str
    block_number: int | None  # None while pending
    sender: str
    to: str | None  # None for a contract creation
    contract: str | None  # the ledger contract called, if it is one
    method: str | None  # the function called, when `contract` knows it
    args: dict[str, Any]
    value: Wei  # wei of ETH sent along
    status: Literal["success", "reverted", "pending"]
    gas_used: int | None
    logs: list[LogView]


class BlockView(BaseModel):
    number: int
    hash: str
    parent_hash: str
    timestamp: int
    gas_used: int
    transactions: list[str]


class Holdings(BaseModel):
    """ZEN held by each ledger contract, read at one block."""

    block_number: int
    zen: dict[str, Wei]  # contract name -> balance


class AccountView(BaseModel):
    """A wallet's ETH and ZEN and its account with the ledger, read from the chain at one block."""

    address: str
    block_number: int
    eth: Wei  # for gas
    zen: Wei
    role: Role
    tier: int
    admitted: bool  # a provider whose benchmark a verifier attested
    staked: Wei  # locked included
    locked: Wei  # collateral committed to running jobs
    unbonding: Wei  # requested out, still slashable until withdrawn
    unbonding_ends: int  # unix seconds; 0 when nothing unbonds
    owed: Wei  # pay the market holds for it (pull: withdraw)


@functools.lru_cache(maxsize=4)
def decoder(ledger: Ledger) -> LedgerDecoder:
    """Built once per ledger (the gateway keeps one): every event's topic, from the manifest's
    ABIs."""
    return LedgerDecoder.of(ledger.w3, ledger.deployment)


@contextmanager
def rpc() -> Iterator[None]:
    """An RPC that stops answering mid-request is the chain's outage, not a bug of ours: a 503 that
    says so."""
    try:
        yield
    except requests.RequestException as exc:
        raise ChainError(f"the chain's RPC does not answer: {type(exc).__name__}") from None


TxHash = Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{64}$", description="A transaction hash.")]
BlockNumber = Annotated[int, Path(ge=0, le=2**63 - 1, description="A block number.")]


def plain(value: Any) -> Any:
    """JSON for decoded ABI values: integers as strings (uint256 outgrows JSON numbers), bytes as
    hex."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return [plain(v) for v in value]


def _log_view(known: LedgerDecoder, log) -> LogView:
    view = {
        "log_index": log["logIndex"],
        "address": log["address"],
        "contract": known.name_of(log["address"]),
        "event": None,
        "args": {},
    }
    if (decoded := known.decode_log(log)) is not None:
        event, args = decoded
        view |= {"event": event, "args": plain(args)}
    return LogView(**view)


@router.get("/config", response_model=ChainConfig, responses=UNAVAILABLE)
def chain_config(ledger: LedgerDep):
    """The chain id, every ledger address, the network fee, the tiers and the ABIs a wallet page
    calls."""
    deployment = ledger.deployment
    with rpc():
        fee_bps = ledger.fee_bps()
        tiers = ledger.tiers()
    return {
        "chain_id": deployment.chain_id,
        "deploy_block": deployment.deploy_block,
        "fee_bps": fee_bps,
        "tiers": [{"name": t["name"], "min_stake": t["minStake"]} for t in tiers],
        "addresses": deployment.addresses,
        "abis": {n: deployment.abis[n] for n in WALLET_CONTRACTS},
    }


@router.get("/tx/{tx_hash}", response_model=TxView, responses=NOT_FOUND | UNAVAILABLE)
def transaction(ledger: LedgerDep, tx_hash: TxHash):
    """The transaction with its call and the ledger's events decoded."""
    with rpc():
        try:
            tx = ledger.w3.eth.get_transaction(tx_hash)
        except TransactionNotFound:
            raise NotFound(
                f"no transaction {tx_hash} on chain {ledger.deployment.chain_id}"
            ) from None
        try:
            receipt = ledger.w3.eth.get_transaction_receipt(tx_hash)
        except TransactionNotFound:
            receipt = None
    known = decoder(ledger)
    name = known.name_of(tx["to"])
    method, args = None, {}
    if name is not None:
        try:
            method, decoded = known.decode_call(tx["to"], tx["input"])
            args = plain(decoded)
        except (
            ValueError,
            DecodingError,
        ):  # a selector the ABI does not know, or calldata cut short
            pass
    status = "pending" if receipt is None else ("success" if receipt["status"] == 1 else "reverted")
    return {
        "hash": "0x" + bytes(tx["hash"]).hex(),
        "block_number": tx["blockNumber"],
        "sender": tx["from"],
        "to": tx["to"],
        "contract": name,
        "method": method,
        "args": args,
        "value": tx["value"],
        "status": status,
        "gas_used": receipt["gasUsed"] if receipt else None,
        "logs": [_log_view(known, log) for log in receipt["logs"]] if receipt else [],
    }


@router.get("/blocks/{number}", response_model=BlockView, responses=NOT_FOUND | UNAVAILABLE)
def block(ledger: LedgerDep, number: BlockNumber):
    """The block's hash, time and transactions."""
    with rpc():
        try:
            b = ledger.w3.eth.get_block(number)
        except BlockNotFound:
            raise NotFound(f"no block {number} on chain {ledger.deployment.chain_id} yet") from None
    return {
        "number": b["number"],
        "hash": "0x" + bytes(b["hash"]).hex(),
        "parent_hash": "0x" + bytes(b["parentHash"]).hex(),
        "timestamp": b["timestamp"],
        "gas_used": b["gasUsed"],
        "transactions": ["0x" + bytes(t).hex() for t in b["transactions"]],
    }


@router.get("/holdings", response_model=Holdings, responses=NOT_FOUND | UNAVAILABLE)
def holdings(
    ledger: LedgerDep,
    block: Annotated[
        int | None,
        Query(
            ge=0,
            le=2**63 - 1,
            description=(
                "Read at this block (e.g. the indexed one, to compare); default the latest."
            ),
        ),
    ] = None,
):
    """ZEN held by the market (open escrow and unpaid earnings), staking and the treasury."""
    first = ledger.deployment.deploy_block
    with rpc():
        head = ledger.w3.eth.block_number
        if block is not None and not first <= block <= head:
            raise NotFound(f"block {block} is outside the ledger's life: blocks {first} to {head}")
        number = head if block is None else block
        try:
            balances = {
                name: ledger.balance(ledger.deployment.addresses[name], block=number)
                for name in HOLDERS
            }
        except BadFunctionCallOutput:  # the token had no code yet: deployed later in the ledger
            raise NotFound(f"block {block}: the ledger was still being deployed") from None
    return {"block_number": number, "zen": balances}


@router.get("/accounts/{address}", response_model=AccountView, responses=UNAVAILABLE)
def account(ledger: LedgerDep, address: AddressDep):
    """The wallet's ETH, ZEN, role, tier, admission, stake and the pay the market owes it, all at
    the latest block."""
    with rpc():
        number = ledger.w3.eth.block_number
        staking = ledger.staking_account(address, block=number)
        eth = ledger.w3.eth.get_balance(address, block_identifier=number)
        zen = ledger.balance(address, block=number)
        owed = ledger.owed(address, block=number)
    return {
        "address": address,
        "block_number": number,
        "eth": eth,
        "zen": zen,
        "role": terms.Role(staking["role"]).label,
        "tier": staking["tier"],
        "admitted": staking["admitted"],
        "staked": staking["staked"],
        "locked": staking["locked"],
        "unbonding": staking["unbonding"],
        "unbonding_ends": staking["unbondingEnds"],
        "owed": owed,
    }

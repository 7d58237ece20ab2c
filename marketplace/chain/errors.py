"""Decode the ledger's custom errors into readable messages."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from functools import cache
from importlib import resources

from eth_abi import decode
from eth_utils import function_signature_to_4byte_selector, is_address, to_checksum_address
from web3.exceptions import ContractCustomError, ContractLogicError, ContractPanicError

from marketplace.chain.zen import exact as exact_zen
from marketplace.errors import ZooError
from marketplace.protocol.terms import JobStatus, Tier

_PLACEHOLDER = re.compile(r"\{(\w+)(?::(\w+))?\}")


class ChainError(ZooError):
    """A chain interaction failed (no RPC, a rejected transaction, a bad deployment)."""


class ContractRevert(ChainError):
    """A contract refused a call with one of its custom errors; the message says why in words."""

    def __init__(self, name: str, args: dict[str, object]):
        self.name = name
        self.args_by_name = args
        super().__init__(sentence(name, args))


@cache
def _revert_table() -> dict:
    """The sentences for the ledger's custom errors, shared with the web pages (which import the
    same file)."""
    return json.loads(
        resources.files("marketplace.chain").joinpath("revert_messages.json").read_text()
    )


# The table's enum kinds, by the terms they name (its "enums" lists are for the web pages, which
# cannot import Python; tests/chain/test_terms.py keeps them equal to these).
_TERMS = {"status": JobStatus, "tier": Tier}


def _formatted(value: object, kind: str | None) -> str:
    if isinstance(value, int):  # the table gives kinds to uint arguments only
        if kind == "zen":
            return exact_zen(value)
        if kind == "time":
            return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if kind in _TERMS:
            return _TERMS[kind].label_of(value)
    if isinstance(value, str) and is_address(value):
        return to_checksum_address(value)
    return str(value)


def sentence(name: str, args: dict[str, object]) -> str:
    """A custom error in words, from the shared table; an error the table lacks is shown as its
    call."""
    template = _revert_table()["messages"].get(name)
    if template is None:
        return f"{name}({', '.join(f'{k}={v}' for k, v in args.items())})"
    return _PLACEHOLDER.sub(lambda m: _formatted(args[m[1]], m[2]), template)


class TransactionReverted(ChainError):
    """A mined transaction failed; `reason` is what the contract said when the call is replayed on
    that block."""

    def __init__(self, tx_hash: str, block: int, reason: ChainError | None):
        self.tx_hash, self.block, self.reason = tx_hash, block, reason
        said = f": {reason}" if reason is not None else ""
        super().__init__(f"transaction {tx_hash} reverted in block {block}{said}")


def _abi_type(param: dict) -> str:
    if param["type"].startswith("tuple"):
        inner = ",".join(_abi_type(p) for p in param["components"])
        return f"({inner}){param['type'][5:]}"
    return param["type"]


@cache
def _error_table() -> dict[bytes, dict]:
    from marketplace.chain.compile import all_abis

    table: dict[bytes, dict] = {}
    for abi in all_abis().values():
        for item in abi:
            if item["type"] == "error":
                types = ",".join(_abi_type(p) for p in item["inputs"])
                table[function_signature_to_4byte_selector(f"{item['name']}({types})")] = item
    return table


def decode_revert(data: str | bytes) -> ContractRevert | None:
    """The custom error encoded in revert `data`, or None if it is not one of ours."""
    raw = (
        bytes.fromhex(data[2:] if isinstance(data, str) and data.startswith("0x") else data)
        if isinstance(data, str)
        else bytes(data)
    )
    item = _error_table().get(raw[:4])
    if item is None:
        return None
    values = decode([_abi_type(p) for p in item["inputs"]], raw[4:])
    return ContractRevert(item["name"], {p["name"]: v for p, v in zip(item["inputs"], values)})


def explain(exc: Exception) -> ChainError:
    """A readable ChainError for whatever web3 raised when a call or transaction reverted."""
    if isinstance(exc, ContractCustomError):
        data = exc.data if isinstance(exc.data, str) else exc.message
        decoded = decode_revert(data) if data is not None else None
        if decoded is not None:
            return decoded
    if isinstance(exc, ContractPanicError):
        return ChainError(f"contract panic: {exc.message}")
    if isinstance(exc, ContractLogicError):
        return ChainError(f"reverted: {exc.message}")
    return ChainError(str(exc))

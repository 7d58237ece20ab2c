"""Decode the ledger's custom errors into readable messages."""

from __future__ import annotations

from functools import cache

from eth_abi import decode
from eth_utils import function_signature_to_4byte_selector
from web3.exceptions import ContractCustomError, ContractLogicError, ContractPanicError

from marketplace.errors import ZooError


class ChainError(ZooError):
    """A chain interaction failed (no RPC, a rejected transaction, a bad deployment)."""


class ContractRevert(ChainError):
    """A contract refused a call with one of its custom errors."""

    def __init__(self, name: str, args: dict[str, object]):
        self.name = name
        self.args_by_name = args
        shown = ", ".join(f"{k}={v}" for k, v in args.items())
        super().__init__(f"{name}({shown})")


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
    raw = bytes.fromhex(data[2:] if isinstance(data, str) and data.startswith("0x") else data) \
        if isinstance(data, str) else bytes(data)
    item = _error_table().get(raw[:4])
    if item is None:
        return None
    values = decode([_abi_type(p) for p in item["inputs"]], raw[4:])
    return ContractRevert(item["name"], {p["name"]: v for p, v in zip(item["inputs"], values)})


def explain(exc: Exception) -> ChainError:
    """A readable ChainError for whatever web3 raised when a call or transaction reverted."""
    if isinstance(exc, ContractCustomError):
        decoded = decode_revert(exc.data if isinstance(exc.data, str) else exc.message)
        if decoded is not None:
            return decoded
    if isinstance(exc, ContractPanicError):
        return ChainError(f"contract panic: {exc.message}")
    if isinstance(exc, ContractLogicError):
        return ChainError(f"reverted: {exc.message}")
    return ChainError(str(exc))

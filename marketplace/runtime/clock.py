"""The chain's clock and its refusals, as the daemon's parts read them."""

from __future__ import annotations

from web3 import Web3

from marketplace.chain.errors import ChainError, ContractRevert


def chain_time(w3: Web3) -> int:
    """The latest block's timestamp: the clock every deadline in the market is checked against."""
    return w3.eth.get_block("latest")["timestamp"]


def revert_name(exc: ChainError) -> str | None:
    """The custom error a contract refused with, or None for any other chain failure."""
    return exc.name if isinstance(exc, ContractRevert) else None


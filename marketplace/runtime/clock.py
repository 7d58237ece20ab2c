"""The chain's clock and its refusals, as the daemon's parts read them."""

from __future__ import annotations

from web3 import Web3

from marketplace.chain.errors import ChainError, ContractRevert, TransactionReverted


def chain_time(w3: Web3) -> int:
    """The latest block's timestamp: the clock every deadline in the market is checked against."""
    return w3.eth.get_block("latest")["timestamp"]


def revert_name(exc: ChainError) -> str | None:
    """The custom error a contract refused with, when the call was estimated or once the mined
    transaction failed; None for any other chain failure."""
    refusal = exc.reason if isinstance(exc, TransactionReverted) else exc
    return refusal.name if isinstance(refusal, ContractRevert) else None

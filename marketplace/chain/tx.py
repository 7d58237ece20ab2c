"""Sign and send transactions from a local key, turning reverts into readable errors."""

from __future__ import annotations

from typing import cast

from eth_account.signers.local import LocalAccount
from eth_account.types import TransactionDictType
from eth_typing import ChecksumAddress
from hexbytes import HexBytes
from web3 import Web3
from web3.contract.contract import ContractConstructor, ContractFunction
from web3.exceptions import ContractCustomError, ContractLogicError, ContractPanicError
from web3.types import BlockIdentifier, TxParams, TxReceipt

from marketplace.chain.errors import ChainError, TransactionReverted, explain

REVERTS = (ContractCustomError, ContractLogicError, ContractPanicError)


def build(
    w3: Web3,
    call: ContractFunction | ContractConstructor,
    sender: ChecksumAddress,
    *,
    gas: int | None = None,
) -> TxParams:
    """The transaction `sender` must sign for `call`, with nonce, gas and chain id filled.

    Gas is estimated first, so a call that would revert fails here with the contract's custom
    error instead of as a mined, failed transaction.
    """
    params: TxParams = {
        "from": sender,
        "nonce": w3.eth.get_transaction_count(sender, "pending"),
        "chainId": w3.eth.chain_id,
    }
    try:
        if gas is None:
            gas = int(call.estimate_gas(params) * 1.2) + 10_000
        return call.build_transaction({**params, "gas": gas})
    except REVERTS as exc:
        raise explain(exc) from None


def send(
    w3: Web3,
    call: ContractFunction | ContractConstructor,
    account: LocalAccount,
    *,
    gas: int | None = None,
) -> TxReceipt:
    """Sign `call` with `account`, send it and wait for its receipt."""
    # eth-account types a transaction as a plain dict of the same fields (web3 casts alike).
    transaction = cast(TransactionDictType, build(w3, call, account.address, gas=gas))
    signed = account.sign_transaction(transaction)
    tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
    receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=120)
    if receipt["status"] != 1:
        raise TransactionReverted(
            tx_hash.to_0x_hex(), receipt["blockNumber"], revert_reason(w3, tx_hash)
        )
    return receipt


def revert_reason(w3: Web3, tx_hash: HexBytes) -> ChainError | None:
    """Why a mined transaction reverted: the contract's error when the call is replayed on the
    state its block left. Most reverts of a sound transaction come from a transaction before it
    in the same block (someone settled first), and that state still refuses the call; None if
    the replay passes."""
    sent = w3.eth.get_transaction(tx_hash)
    call: TxParams = {
        "from": sent["from"],
        "to": sent["to"],
        "data": sent["input"],
        "value": sent["value"],
        "gas": sent["gas"],
    }
    try:
        w3.eth.call(call, block_identifier=sent["blockNumber"])
    except REVERTS as exc:
        return explain(exc)
    return None


def call(fn: ContractFunction, block: BlockIdentifier | None = None):
    """A read-only call at `block` (the latest by default), with reverts decoded."""
    try:
        return fn.call(block_identifier=block)
    except REVERTS as exc:
        raise explain(exc) from None

"""Transactions for wallets the gateway never holds: built unsigned for the sender, taken back
signed and broadcast."""

from __future__ import annotations

import logging

from eth_account import Account
from eth_account._utils.legacy_transactions import Transaction as LegacyTransaction
from eth_account.typed_transactions import TypedTransaction
from eth_keys.exceptions import ValidationError as BadSignature
from hexbytes import HexBytes
from rlp.exceptions import RLPException
from web3.exceptions import Web3RPCError

from marketplace.chain import tx
from marketplace.chain.errors import ChainError
from marketplace.chain.ledger import Ledger

log = logging.getLogger(__name__)

LEDGER_CONTRACTS = ("ZenToken", "Staking", "JobMarket", "Verification", "Treasury", "Registry")


class TransactionRejected(ChainError, ValueError):
    """A signed transaction the gateway will not broadcast, or one the chain refused."""


def unsigned(ledger: Ledger, call, sender: str) -> dict:
    """`call` as a transaction for `sender` to sign: nonce, gas (estimated, so a revert shows
    now as the contract's error) and chain id filled."""
    built = tx.build(ledger.w3, call, sender)
    built["data"] = HexBytes(built["data"]).to_0x_hex()
    return built


def decode_signed(raw: bytes) -> dict:
    """The signed transaction's sender, chain id, target and nonce; refused if it does not
    decode."""
    try:
        if raw and raw[0] < 0xC0:  # EIP-2718 typed envelope
            fields = TypedTransaction.from_bytes(HexBytes(raw)).as_dict()
            chain_id, to, nonce = fields["chainId"], fields["to"], fields["nonce"]
        else:
            legacy = LegacyTransaction.from_bytes(raw)
            chain_id = (legacy.v - 35) // 2 if legacy.v >= 35 else None  # EIP-155, or none
            to, nonce = legacy.to, legacy.nonce
        sender = Account.recover_transaction(raw)
    except (RLPException, ValueError, TypeError, KeyError, BadSignature) as exc:
        raise TransactionRejected(f"not a signed transaction: {exc}") from None
    to = HexBytes(to)
    return {
        "sender": sender,
        "chain_id": chain_id,
        "to": to.to_0x_hex() if to else None,
        "nonce": nonce,
    }


def broadcast(ledger: Ledger, raw: bytes) -> tuple[str, dict]:
    """Send a signed transaction to one of the ledger's contracts on this chain; its hash and
    decoded fields."""
    fields = decode_signed(raw)
    chain_id = ledger.deployment.chain_id
    if fields["chain_id"] != chain_id:
        raise TransactionRejected(
            f"the transaction is for chain {fields['chain_id']}, the ledger is on chain {chain_id}"
        )
    addresses = ledger.deployment.addresses
    contracts = {addresses[name].lower(): name for name in LEDGER_CONTRACTS if name in addresses}
    if fields["to"] is None or fields["to"].lower() not in contracts:
        raise TransactionRejected(
            f"the transaction goes to {fields['to']}, which is not a ledger contract"
        )
    try:
        tx_hash = ledger.w3.eth.send_raw_transaction(raw)
    except Web3RPCError as exc:  # nonce too low, too little ETH for gas, underpriced...
        raise TransactionRejected(f"the chain refused the transaction: {exc.message}") from None
    log.info(
        "broadcast %s from %s to %s",
        tx_hash.to_0x_hex(),
        fields["sender"],
        contracts[fields["to"].lower()],
    )
    return tx_hash.to_0x_hex(), fields

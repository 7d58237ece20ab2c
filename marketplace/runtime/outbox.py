"""Exactly-once transactions: each is signed and journaled under a key before it is broadcast."""

from __future__ import annotations

import logging
import threading

from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.contract.contract import ContractFunction
from web3.exceptions import TransactionNotFound, Web3RPCError
from web3.types import TxReceipt

from marketplace.chain.errors import ChainError, explain
from marketplace.chain.tx import REVERTS

from .journal import JournalDB, Outgoing

log = logging.getLogger(__name__)


class Outbox:
    """Sends the daemon's transactions so that a crash at any point never sends one twice.

    A transaction is signed, then journaled with its hash, then broadcast. After a restart the
    same key finds the journaled transaction and waits for it (or broadcasts the very same bytes
    again), so a commitment or checkpoint cannot land twice under two nonces. One lock orders
    every send, so the loop and the training thread never race for a nonce.
    """

    def __init__(self, w3: Web3, account: LocalAccount, journal: JournalDB, receipt_timeout: float = 120):
        self.w3 = w3
        self.account = account
        self.journal = journal
        self.receipt_timeout = receipt_timeout
        self._lock = threading.Lock()

    def sent(self, key: str) -> bool:
        return self.journal.outgoing(key) is not None

    def send(self, key: str, fn: ContractFunction) -> TxReceipt:
        """Send `fn` once under `key` and wait for its receipt; raises the contract's error if it
        would revert (nothing is journaled then, so the key stays free)."""
        with self._lock:
            outgoing = self.journal.outgoing(key)
            if outgoing is None:
                outgoing = self._sign(key, fn)
            elif not self._known(outgoing):
                outgoing = self._rebroadcast(outgoing, fn)
            receipt = self.w3.eth.wait_for_transaction_receipt(outgoing.tx_hash, timeout=self.receipt_timeout)
            self.journal.finish_outgoing(key)
        if receipt["status"] != 1:
            raise ChainError(f"{key}: transaction {outgoing.tx_hash} reverted in block {receipt['blockNumber']}")
        return receipt

    def _sign(self, key: str, fn: ContractFunction) -> Outgoing:
        address = self.account.address
        params = {"from": address, "nonce": self.w3.eth.get_transaction_count(address, "pending")}
        try:
            gas = int(fn.estimate_gas(params) * 1.2) + 10_000
            tx = fn.build_transaction({**params, "gas": gas})
        except REVERTS as exc:
            raise explain(exc) from None
        signed = self.account.sign_transaction(tx)
        outgoing = Outgoing(key, "0x" + signed.hash.hex().removeprefix("0x"), bytes(signed.raw_transaction), False)
        self.journal.add_outgoing(key, outgoing.tx_hash, outgoing.raw)
        self._broadcast(outgoing)
        return outgoing

    def _known(self, outgoing: Outgoing) -> bool:
        try:
            self.w3.eth.get_transaction(outgoing.tx_hash)
            return True
        except TransactionNotFound:
            return False

    def _rebroadcast(self, outgoing: Outgoing, fn: ContractFunction) -> Outgoing:
        """A journaled transaction the chain never saw: send the same bytes, or, if its nonce
        went to a later transaction meanwhile, sign it afresh (it cannot land any more)."""
        log.info("rebroadcasting %s (%s)", outgoing.key, outgoing.tx_hash)
        try:
            self._broadcast(outgoing)
            return outgoing
        except Web3RPCError as exc:
            if "nonce" not in str(exc).lower():
                raise ChainError(f"{outgoing.key}: {exc}") from None
        self.journal.forget_outgoing(outgoing.key)
        return self._sign(outgoing.key, fn)

    def _broadcast(self, outgoing: Outgoing) -> None:
        self.w3.eth.send_raw_transaction(outgoing.raw)
        log.debug("sent %s as %s", outgoing.key, outgoing.tx_hash)

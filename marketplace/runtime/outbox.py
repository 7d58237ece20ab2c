"""Exactly-once transactions: each is signed and journaled under a key before it is broadcast."""

from __future__ import annotations

import logging
import threading
import time
from typing import cast

from eth_account.signers.local import LocalAccount
from eth_account.types import TransactionDictType
from eth_typing import HexStr
from hexbytes import HexBytes
from web3 import Web3
from web3.contract.contract import ContractFunction
from web3.exceptions import TimeExhausted, TransactionNotFound, Web3RPCError
from web3.types import TxReceipt

from marketplace.chain.errors import ChainError, TransactionReverted
from marketplace.chain.tx import build, revert_reason

from .journal import CONFIRMED, MINED, JournalDB, Outgoing

log = logging.getLogger(__name__)

RECEIPT_POLL_S = 0.1  # between looks for a receipt, as web3's own wait


class Outbox:
    """Sends the daemon's transactions so that a crash at any point never sends one twice.

    A transaction is signed, then journaled with its hash, then broadcast. After a restart the
    same key finds the journaled transaction and waits for it (or broadcasts the very same bytes
    again), so a commitment or checkpoint cannot land twice under two nonces.

    A receipt is not the end: a reorg may drop the block that holds it. The event follower tells
    the outbox which blocks it read on the chain as it is now (`confirm`) and from which block a
    reorg replaced them (`resend_after`); a transaction of ours that the chain no longer holds is
    sent again, the very same bytes in the order they were signed, so each lands once on the
    branch the chain kept (or, if that branch already holds it, is found there). One that now
    fails frees its key, as any mined failure does: the role's next tick decides anew.

    Sends go one at a time, each to its receipt, so the loop and the training thread never race
    for a nonce and each transaction is built on the state its predecessor left. Signing,
    broadcasting and journaling take a second lock, the only one the follower takes: a send
    waiting for its receipt never holds up the follower, which must first send again what a
    reorg dropped before that send's transaction (their nonces come first).
    """

    def __init__(
        self, w3: Web3, account: LocalAccount, journal: JournalDB, receipt_timeout: float = 120
    ):
        self.w3 = w3
        self.account = account
        self.journal = journal
        self.receipt_timeout = receipt_timeout
        self._sending = threading.Lock()
        self._lock = threading.Lock()

    def sent(self, key: str) -> bool:
        return self.journal.outgoing(key) is not None

    def send(self, key: str, fn: ContractFunction) -> TxReceipt:
        """Send `fn` once under `key` and wait for its receipt. Raises the contract's error if it
        would revert (nothing is journaled then, so the key stays free), or TransactionReverted,
        with the contract's error as its reason, if it was mined and failed: nothing was done
        under the key, so it is free again and a later send estimates anew."""
        with self._sending:
            with self._lock:
                outgoing = self.journal.outgoing(key)
                if outgoing is None:
                    outgoing = self._sign(key, fn)
                elif not self._known(outgoing):
                    outgoing = self._rebroadcast(outgoing, fn)
            outgoing, receipt = self._await_receipt(outgoing, fn)
            with self._lock:
                if receipt["status"] != 1:
                    self.journal.forget_outgoing(key)
                    reason = revert_reason(self.w3, HexBytes(outgoing.tx_hash))
                    raise TransactionReverted(outgoing.tx_hash, receipt["blockNumber"], reason)
                self.journal.finish_outgoing(key, receipt["blockNumber"])
        return receipt

    def resend_after(self, fork: int) -> None:
        """A reorg dropped the blocks after `fork`: every transaction of ours mined in them is
        sent again."""
        with self._lock:
            self._send_again(self.journal.reopen_outgoing(fork))

    def confirm(self, through: int) -> None:
        """The follower read the chain up to block `through`: each transaction of ours mined up
        to there is confirmed if the chain still holds it, and sent again if a reorg the follower
        did not see (it replaced blocks before they were read) dropped it; so is one a reorg
        dropped whose sending again failed on the way (the RPC node down)."""
        with self._lock:
            dropped = []
            for outgoing in self.journal.unconfirmed(through):
                receipt = self._receipt(outgoing)
                if receipt is None:
                    dropped.append(outgoing)
                elif receipt["status"] != 1:  # sent again after a reorg, and failed there
                    log.warning("%s failed once sent again after the reorg", outgoing.key)
                    self.journal.forget_outgoing(outgoing.key)
                else:  # one mined again above `through` waits its turn
                    block = receipt["blockNumber"]
                    done = CONFIRMED if block <= through else MINED
                    self.journal.finish_outgoing(outgoing.key, block, done)
            if dropped:
                self.journal.reopen(dropped)
                self._send_again(dropped)

    def _send_again(self, dropped: list[Outgoing]) -> None:
        for outgoing in dropped:
            if not self._known(outgoing):
                log.warning("a reorg dropped %s; sending it again", outgoing.key)
                try:
                    self._broadcast(outgoing)
                except Web3RPCError as exc:  # its nonce went to another transaction
                    log.warning("%s cannot be sent again: %s", outgoing.key, exc)
                    self.journal.forget_outgoing(outgoing.key)
        for outgoing in dropped:
            if self.journal.outgoing(outgoing.key) is None:
                continue
            outgoing, receipt = self._await_receipt(outgoing)
            if receipt["status"] == 1:
                self.journal.finish_outgoing(outgoing.key, receipt["blockNumber"])
            else:
                log.warning("%s failed once sent again after the reorg", outgoing.key)
                self.journal.forget_outgoing(outgoing.key)

    def _await_receipt(
        self, outgoing: Outgoing, fn: ContractFunction | None = None
    ) -> tuple[Outgoing, TxReceipt]:
        """`outgoing`'s receipt, and the transaction it is for: one the node no longer knows (a
        reorg dropped its block before its receipt was read) is sent again, the same bytes, or,
        for a send (`fn`), signed afresh if its nonce went to another transaction meanwhile.
        The follower holds the lock while it sends again what the reorg dropped before it."""
        deadline = time.monotonic() + self.receipt_timeout
        while (receipt := self._receipt(outgoing)) is None:
            if time.monotonic() >= deadline:
                raise TimeExhausted(
                    f"{outgoing.key}: transaction {outgoing.tx_hash} is not in the chain after "
                    f"{self.receipt_timeout:g} seconds"
                )
            if not self._known(outgoing):
                outgoing = self._send_dropped(outgoing, fn)
            time.sleep(RECEIPT_POLL_S)
        return outgoing, receipt

    def _send_dropped(self, outgoing: Outgoing, fn: ContractFunction | None) -> Outgoing:
        if fn is None:  # the follower's, under the lock
            log.warning("a reorg dropped %s again; sending it again", outgoing.key)
            self._broadcast(outgoing)
            return outgoing
        with self._lock:
            if self._receipt(outgoing) is not None or self._known(outgoing):
                return outgoing  # the follower sent it again meanwhile
            log.warning("a reorg dropped %s before its receipt; sending it again", outgoing.key)
            return self._rebroadcast(outgoing, fn)

    def _sign(self, key: str, fn: ContractFunction) -> Outgoing:
        # eth-account types a transaction as a plain dict of the same fields (web3 casts alike).
        signed = self.account.sign_transaction(
            cast(TransactionDictType, build(self.w3, fn, self.account.address))
        )
        outgoing = Outgoing(
            key, "0x" + signed.hash.hex().removeprefix("0x"), bytes(signed.raw_transaction), False
        )
        self.journal.add_outgoing(key, outgoing.tx_hash, outgoing.raw)
        self._broadcast(outgoing)
        return outgoing

    def _receipt(self, outgoing: Outgoing) -> TxReceipt | None:
        try:
            return self.w3.eth.get_transaction_receipt(HexStr(outgoing.tx_hash))
        except TransactionNotFound:
            return None

    def _known(self, outgoing: Outgoing) -> bool:
        try:
            self.w3.eth.get_transaction(HexStr(outgoing.tx_hash))
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

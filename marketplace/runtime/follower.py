"""Following the ledger's events into a daemon's journal, each event handled once across crashes."""

from __future__ import annotations

import logging
from collections.abc import Callable

from web3 import Web3
from web3.contract import Contract
from web3.types import EventData

from marketplace.chain.events import ChainReorganized, EventCursor

from .heads import HeadFeed
from .journal import JournalDB
from .loop import TRANSIENT
from .outbox import Outbox

log = logging.getLogger(__name__)

# Failures in a row of one event's handling that the network might mend, before it is quarantined.
ATTEMPTS = 5


class EventFollower:
    """Hands each new event to `handle` and stores the cursor past them, all in one journal
    transaction: a crash, or a handler that fails, leaves the journal and the cursor as they were,
    and the same events come again. Handlers record what events mean; a transaction that must
    land once is sent later, by the tick, through the outbox: an outbox record made inside a
    transaction that rolls back would not outlive its broadcast.

    Events are written by whoever sends transactions, so one may make a handler fail. A failure
    the network may mend (TRANSIENT: our IPFS node or RPC node down) fails the poll, and the
    same events come again; anything else, or a transient failure that comes back ATTEMPTS
    times for the same event, puts that event in quarantine: its records are undone, it is
    logged with the error and kept in the journal's quarantine table, and the events after it
    are handled. One bad event costs its sender a transaction, never the daemon its progress.

    When the chain drops a block already read, what the role recorded from the dropped blocks'
    events is taken back (the journal logs how, `JournalDB.handling`), reading resumes after the
    newest read block the chain still has, so the events of the branch the chain kept are
    handled afresh, the role's `outbox` sends again what the dropped blocks held of its own, and
    `on_reorg` hears of it: the role's hook for what it keeps outside the journal. Each poll also
    tells the outbox how far the chain was read, so a transaction of ours dropped with blocks
    the follower never read is found and sent again too.
    """

    def __init__(
        self,
        w3: Web3,
        contracts: list[Contract],
        journal: JournalDB,
        handle: Callable[[EventData], None],
        *,
        start_block: int,
        confirmations: int = 0,
        heads: HeadFeed | None = None,
        outbox: Outbox | None = None,
        on_reorg: Callable[[int], None] = lambda fork: None,
    ):
        self.journal = journal
        self.handle = handle
        self.outbox = outbox
        self.on_reorg = on_reorg  # told the newest block the chain kept
        self.start_block = start_block
        next_block, last = journal.cursor(start_block)
        self.cursor = EventCursor(w3, contracts, next_block, confirmations, last=last, heads=heads)
        self._failures: dict[tuple[int, int, str], int] = {}  # event -> transient failures

    def follow(self) -> int:
        """Handle what is new since the last call; returns how many events were handled."""
        position = self.cursor.position
        try:
            events = self.cursor.poll()
            if self.cursor.position == position:
                return 0  # the chain stood still: nothing to record
            with self.journal.transaction():
                for event in events:
                    self._handle(event)
                self.journal.set_cursor(*self.cursor.position)
        except ChainReorganized as reorg:
            self._reorganized(reorg)
            return 0
        except BaseException:
            self.cursor.seek(*position)
            raise
        if self.outbox is not None and self.cursor.last is not None:
            self.outbox.confirm(self.cursor.last.number)
        return len(events)

    def _handle(self, event: EventData) -> None:
        identity = (event["blockNumber"], event["logIndex"], event["transactionHash"].hex())
        try:
            with self.journal.savepoint(), self.journal.handling(event["blockNumber"]):
                self.handle(event)
        except TRANSIENT as exc:
            failures = self._failures[identity] = self._failures.get(identity, 0) + 1
            if failures < ATTEMPTS:
                raise
            self._quarantine(identity, event, exc)
        except Exception as exc:  # noqa: BLE001 - whatever an event makes a handler raise
            self._quarantine(identity, event, exc)
        self._failures.pop(identity, None)

    def _quarantine(self, identity: tuple[int, int, str], event: EventData, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}"[:2000]
        self.journal.quarantine(*identity, event["event"], error)
        log.error(
            "%s in block %d (log %d, transaction %s) quarantined, handling it failed: %s",
            event["event"],
            *identity,
            error,
            exc_info=not isinstance(exc, TRANSIENT),
        )

    def _reorganized(self, reorg: ChainReorganized) -> None:
        fork = self.cursor.fork(self.journal.read_blocks())
        next_block = fork.number + 1 if fork is not None else self.start_block
        with self.journal.transaction():
            undone = self.journal.undo_after(next_block - 1)
            self.journal.set_cursor(next_block, fork)
        self.cursor.seek(next_block, fork)
        log.warning(
            "%s; took back %d records of the dropped blocks' events, reading events again from "
            "block %d and sending again what the dropped blocks held of ours",
            reorg,
            undone,
            next_block,
        )
        if self.outbox is not None:
            self.outbox.resend_after(next_block - 1)
        self.on_reorg(next_block - 1)

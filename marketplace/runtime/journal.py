"""A daemon's SQLite journal: the event cursor, the transaction outbox and the payouts every role
keeps, under the tables of the role's own state."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from marketplace.chain.events import BlockMark
from marketplace.errors import ZooError

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- the last block of each poll
CREATE TABLE IF NOT EXISTS blocks (number INTEGER PRIMARY KEY, hash TEXT NOT NULL);
-- block: where a done transaction was mined, so a reorg that drops that block finds it
CREATE TABLE IF NOT EXISTS outbox (
    key TEXT PRIMARY KEY, tx_hash TEXT NOT NULL, raw BLOB NOT NULL, done INTEGER NOT NULL DEFAULT 0,
    block INTEGER
);
-- state: settled | withdrawn
CREATE TABLE IF NOT EXISTS payouts (job_id INTEGER PRIMARY KEY, state TEXT NOT NULL);
-- events whose handling failed for good, kept for the operator instead of stopping the daemon
CREATE TABLE IF NOT EXISTS quarantine (
    block INTEGER, log_index INTEGER, tx_hash TEXT, event TEXT, error TEXT,
    PRIMARY KEY (block, log_index, tx_hash)
);
"""
# How far back the cursor's read blocks are kept: a reorg deeper than this reads again from the
# start.
KEEP_BLOCKS = 256


class JournalError(ZooError):
    """A journal file this version cannot read."""


@dataclass(frozen=True)
class Outgoing:
    """A signed transaction recorded before it was broadcast."""

    key: str
    tx_hash: str
    raw: bytes
    done: bool


class JournalDB:
    """One SQLite file, written in autocommit so each record is durable once its call returns.

    A daemon's loop and its worker threads share it, hence one connection behind a lock; a
    `transaction()` groups records that must land together (events and the cursor past them).
    Subclasses add their role's tables in `ROLE_SCHEMA`; `LAYOUT` numbers the shape of all the
    tables, so a journal of another shape is refused when opened rather than failing mid-run.
    """

    ROLE_SCHEMA = ""
    LAYOUT = 3

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._check_layout()
        self._db.executescript(SCHEMA + self.ROLE_SCHEMA)
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('layout', ?)", (str(self.LAYOUT),))
        self._lock = threading.RLock()

    def _check_layout(self) -> None:
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master")}
        if not tables:
            return  # a new journal
        found = None
        if "meta" in tables:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'layout'").fetchone()
            found = row[0] if row else None
        if found != str(self.LAYOUT):
            self._db.close()
            raise JournalError(
                f"journal {self.path} was written by another version of zoo-compute (layout "
                f"{found or 1}, this version reads {self.LAYOUT}): move it away to start a new "
                "one; what was committed on chain stays there"
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _run(self, sql: str, *args) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything recorded inside lands together or not at all; other threads wait meanwhile. A
        transaction opened inside another is part of it."""
        with self._lock:
            if self._db.in_transaction:  # this thread's own, since it holds the lock: join it
                yield
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside a transaction: what is recorded in the block is undone if it raises, and the
        transaction goes on."""
        with self._lock:
            self._db.execute("SAVEPOINT handling")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK TO handling")
                self._db.execute("RELEASE handling")
                raise
            self._db.execute("RELEASE handling")

    def quarantine(self, block: int, log_index: int, tx_hash: str, event: str, error: str) -> None:
        self._run(
            "INSERT OR REPLACE INTO quarantine VALUES (?, ?, ?, ?, ?)",
            block,
            log_index,
            tx_hash,
            event,
            error,
        )

    def quarantined(self) -> list[tuple[int, int, str, str, str]]:
        """(block, log index, transaction, event name, error) of each quarantined event."""
        return self._run("SELECT * FROM quarantine ORDER BY block, log_index")

    # --- the event cursor ------------------------------------------------------------------

    def cursor(self, start_block: int) -> tuple[int, BlockMark | None]:
        """The next block to read (`start_block` before the first poll) and the last block read."""
        rows = self._run("SELECT value FROM meta WHERE key = 'next_block'")
        next_block = int(rows[0][0]) if rows else start_block
        last = self._run("SELECT number, hash FROM blocks WHERE number = ?", next_block - 1)
        return next_block, BlockMark(*last[0]) if last else None

    def set_cursor(self, next_block: int, last: BlockMark | None) -> None:
        """Store where reading resumes; blocks recorded above `last` (orphaned by a reorg) go."""
        with self.transaction():
            self._run("INSERT OR REPLACE INTO meta VALUES ('next_block', ?)", str(next_block))
            self._run(
                "DELETE FROM blocks WHERE number >= ? OR number < ?",
                next_block,
                next_block - KEEP_BLOCKS,
            )
            if last is not None:
                self._run("INSERT OR REPLACE INTO blocks VALUES (?, ?)", last.number, last.hash)

    def read_blocks(self) -> list[BlockMark]:
        """The blocks that ended the recent polls, newest first: where a reorg is traced back to."""
        return [
            BlockMark(*row)
            for row in self._run("SELECT number, hash FROM blocks ORDER BY number DESC")
        ]

    # --- the outbox ------------------------------------------------------------------------

    def outgoing(self, key: str) -> Outgoing | None:
        rows = self._run("SELECT key, tx_hash, raw, done FROM outbox WHERE key = ?", key)
        return (
            Outgoing(rows[0][0], rows[0][1], bytes(rows[0][2]), bool(rows[0][3])) if rows else None
        )

    def add_outgoing(self, key: str, tx_hash: str, raw: bytes) -> None:
        self._run(
            "INSERT OR REPLACE INTO outbox (key, tx_hash, raw) VALUES (?, ?, ?)", key, tx_hash, raw
        )

    def finish_outgoing(self, key: str, block: int | None = None) -> None:
        self._run("UPDATE outbox SET done = 1, block = ? WHERE key = ?", block, key)

    def reopen_outgoing(self, after_block: int) -> list[Outgoing]:
        """Mark the transactions mined after `after_block` (dropped by a reorg) as not done, and
        return them in the order they were signed (their nonces' order)."""
        with self.transaction():
            rows = self._run(
                "SELECT key, tx_hash, raw FROM outbox WHERE done = 1 AND block > ? ORDER BY rowid",
                after_block,
            )
            self._run("UPDATE outbox SET done = 0 WHERE done = 1 AND block > ?", after_block)
        return [Outgoing(key, tx_hash, bytes(raw), False) for key, tx_hash, raw in rows]

    def forget_outgoing(self, key: str) -> None:
        self._run("DELETE FROM outbox WHERE key = ?", key)

    # --- payouts: the market's pull payments of a settled job ----------------------------

    def set_payout(self, job_id: int, state: str) -> None:
        self._run("INSERT OR REPLACE INTO payouts VALUES (?, ?)", job_id, state)

    def payouts(self, state: str) -> list[int]:
        return [
            row[0]
            for row in self._run(
                "SELECT job_id FROM payouts WHERE state = ? ORDER BY job_id", state
            )
        ]

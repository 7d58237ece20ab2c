"""A daemon's SQLite journal: the event cursor, the transaction outbox and the payouts every role
keeps, under the tables of the role's own state, and the undo log that takes back what events of
blocks a reorg dropped recorded there."""

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
-- done: 0 sent, 1 mined (its receipt in hand), 2 confirmed (the event follower read its block
-- and the chain still held it); block: where it was mined, so a reorg dropping that block finds it
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
-- what takes back each change an event handler made: the statement, and the event's block
CREATE TABLE IF NOT EXISTS undo (seq INTEGER PRIMARY KEY, block INTEGER NOT NULL, statement TEXT);
"""
# The runtime's own bookkeeping, which a reorg moves by other means (the cursor is set back, the
# outbox re-sends): every other table holds what events meant, so handlers' changes to it are
# logged for undoing.
BOOKKEEPING = ("meta", "blocks", "outbox", "quarantine", "undo")
# An outbox record's `done`: mined (its receipt in hand), then confirmed.
MINED, CONFIRMED = 1, 2
# How far back the cursor's read blocks are kept: a reorg deeper than this reads again from the
# start.
KEEP_BLOCKS = 256


class JournalError(ZooError):
    """A journal file this version cannot read."""


def _undo_statements(table: str, columns: list[str]) -> dict[str, str]:
    """For each kind of change to `table`, an SQL expression, evaluated in its trigger, that
    gives the statement taking that change back: an insert is deleted, a deleted row put back,
    and an update puts back only the columns it changed (others may have changed since, outside
    any handler)."""
    names = ", ".join(f'"{c}"' for c in columns)
    values = " || ', ' || ".join(f'quote(old."{c}")' for c in columns)
    changed = " || ".join(
        f"""CASE WHEN old."{c}" IS new."{c}" THEN '' """
        f"""ELSE '"{c}" = ' || quote(old."{c}") || ', ' END"""
        for c in columns
    )
    return {
        "INSERT": f"""'DELETE FROM "{table}" WHERE rowid = ' || new.rowid""",
        "UPDATE": (
            f"""'UPDATE "{table}" SET ' || {changed} || 'rowid = rowid WHERE rowid = ' """
            "|| old.rowid"
        ),
        "DELETE": (
            f"""'INSERT OR REPLACE INTO "{table}" (rowid, {names}) VALUES (' || old.rowid """
            f"|| ', ' || {values} || ')'"
        ),
    }


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

    What an event handler records (inside `handling(block)`) in any table but the runtime's
    bookkeeping is logged with the statement that takes it back, by triggers on every table, so
    a role writes its handlers as if blocks were final: when a reorg drops blocks, `undo_after`
    takes back what their events recorded, newest first, and the events of the branch the chain
    kept are handled afresh. Changes made outside handlers (a unit trained, a verdict posted) are
    the role's own and stay, unless undoing deletes their record (the event that made it is
    gone) or puts back a column the handler changed.
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
        self._event_block: int | None = None  # the block of the event being handled, if any
        self._log_changes()

    def _log_changes(self) -> None:
        """Triggers that log how to take back each change an event handler makes to the role's
        tables. TEMP triggers live with this connection, so the file holds none that calls a
        function only this class defines. With recursive triggers on, the row an INSERT OR
        REPLACE deletes is logged too, and comes back when the insert is undone."""
        self._db.create_function("zoo_event_block", 0, lambda: self._event_block)
        self._db.execute("PRAGMA recursive_triggers = ON")
        tables = [
            row[0]
            for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if row[0] not in BOOKKEEPING
        ]
        for table in tables:
            columns = [row[1] for row in self._db.execute(f'PRAGMA table_info("{table}")')]
            for change, undo in _undo_statements(table, columns).items():
                self._db.execute(
                    f'CREATE TEMP TRIGGER IF NOT EXISTS "undo_{change.lower()}_{table}" '
                    f'AFTER {change} ON "{table}" WHEN zoo_event_block() IS NOT NULL BEGIN '
                    f"INSERT INTO undo (block, statement) VALUES (zoo_event_block(), {undo}); END"
                )

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

    @contextmanager
    def handling(self, block: int) -> Iterator[None]:
        """What is recorded inside is what an event of `block` means: logged, so that a reorg
        dropping the block can take it back."""
        with self._lock:
            self._event_block = block
            try:
                yield
            finally:
                self._event_block = None

    def undo_after(self, block: int) -> int:
        """Take back, newest first, what the events of the blocks after `block` recorded (a reorg
        dropped those blocks); returns how many changes were taken back."""
        with self.transaction():
            rows = self._run("SELECT statement FROM undo WHERE block > ? ORDER BY seq DESC", block)
            for (statement,) in rows:
                self._run(statement)
            self._run("DELETE FROM undo WHERE block > ?", block)
        return len(rows)

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
            # a reorg deeper than the blocks kept is not traced to where it forked: nothing to undo
            self._run("DELETE FROM undo WHERE block < ?", next_block - KEEP_BLOCKS)
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

    def finish_outgoing(self, key: str, block: int | None = None, done: int = MINED) -> None:
        self._run("UPDATE outbox SET done = ?, block = ? WHERE key = ?", done, block, key)

    def unconfirmed(self, through: int) -> list[Outgoing]:
        """In the order signed: the transactions mined up to block `through` and not confirmed
        yet, and those a reorg dropped (they keep the block they were mined in) whose sending
        again has not been seen mined."""
        rows = self._run(
            "SELECT key, tx_hash, raw, done FROM outbox "
            "WHERE (done = ? AND block <= ?) OR (done = 0 AND block IS NOT NULL) ORDER BY rowid",
            MINED,
            through,
        )
        return [Outgoing(key, tx_hash, bytes(raw), bool(done)) for key, tx_hash, raw, done in rows]

    def reopen(self, dropped: list[Outgoing]) -> None:
        """Mark transactions a reorg dropped as not done: sent again, they are waited for."""
        with self.transaction():
            for outgoing in dropped:
                self._run("UPDATE outbox SET done = 0 WHERE key = ?", outgoing.key)

    def reopen_outgoing(self, after_block: int) -> list[Outgoing]:
        """Mark the transactions mined after `after_block` (dropped by a reorg) as not done, and
        return them in the order they were signed (their nonces' order)."""
        with self.transaction():
            rows = self._run(
                "SELECT key, tx_hash, raw FROM outbox WHERE done > 0 AND block > ? ORDER BY rowid",
                after_block,
            )
            self._run("UPDATE outbox SET done = 0 WHERE done > 0 AND block > ?", after_block)
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

"""A daemon's SQLite journal: the chain cursor and the transaction outbox every role keeps, under
the tables of the role's own state."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (
    key TEXT PRIMARY KEY, tx_hash TEXT NOT NULL, raw BLOB NOT NULL, done INTEGER NOT NULL DEFAULT 0);
"""


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
    Subclasses add their role's tables in `ROLE_SCHEMA`.
    """

    ROLE_SCHEMA = ""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA + self.ROLE_SCHEMA)
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _run(self, sql: str, *args) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything recorded inside lands together or not at all; other threads wait meanwhile."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # --- the chain cursor ------------------------------------------------------------------

    def next_block(self, default: int) -> int:
        rows = self._run("SELECT value FROM meta WHERE key = 'next_block'")
        return int(rows[0][0]) if rows else default

    def set_next_block(self, block: int) -> None:
        self._run("INSERT OR REPLACE INTO meta VALUES ('next_block', ?)", str(block))

    # --- the outbox ------------------------------------------------------------------------

    def outgoing(self, key: str) -> Outgoing | None:
        rows = self._run("SELECT key, tx_hash, raw, done FROM outbox WHERE key = ?", key)
        return Outgoing(rows[0][0], rows[0][1], bytes(rows[0][2]), bool(rows[0][3])) if rows else None

    def add_outgoing(self, key: str, tx_hash: str, raw: bytes) -> None:
        self._run("INSERT OR REPLACE INTO outbox (key, tx_hash, raw) VALUES (?, ?, ?)", key, tx_hash, raw)

    def finish_outgoing(self, key: str) -> None:
        self._run("UPDATE outbox SET done = 1 WHERE key = ?", key)

    def forget_outgoing(self, key: str) -> None:
        self._run("DELETE FROM outbox WHERE key = ?", key)

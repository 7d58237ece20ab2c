"""Answers that only change when the indexer commits, served from memory until it does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from marketplace.gateway import db


class IndexCache:
    """Serialized answers keyed by what they show, valid while the indexer's cursor stays where it
    was.

    The cursor is re-read at most every `recheck` seconds, so a hot read costs no query at all and
    an answer lags the index by at most that much (the indexer itself steps once a second). One
    cache per server process; `size` bounds it, oldest entries out first.
    """

    def __init__(self, recheck: float = 0.25, size: int = 10_000):
        self.recheck = recheck
        self.size = size
        self._entries: dict[object, tuple[tuple, bytes]] = {}
        self._cursor: tuple = ()
        self._checked = float("-inf")
        self._refreshing = (
            False  # one caller re-reads the cursor; the others keep answering meanwhile
        )
        self._lock = threading.Lock()

    def _version(self, session: Session) -> tuple:
        now = time.monotonic()
        if now - self._checked > self.recheck:
            try:
                row = session.execute(
                    select(db.IndexerState.next_block, db.IndexerState.last_block_hash)
                ).first()
                self._cursor, self._checked = tuple(row or ()), now
            finally:
                self._refreshing = False
        return self._cursor

    def fresh(self, key: object) -> bytes | None:
        """The answer for `key` while it matches the index, without touching the database.

        When the cursor is due for a re-read, the first caller gets None (and re-reads it through
        `get`); the others are answered from memory meanwhile rather than all queueing for the
        database.
        """
        hit = self._entries.get(key)
        if hit is None or hit[0] != self._cursor:
            return None
        if time.monotonic() - self._checked > self.recheck:
            with self._lock:
                if not self._refreshing:
                    self._refreshing = True
                    return None
        return hit[1]

    def get(self, session: Session, key: object, build: Callable[[], bytes]) -> bytes:
        """The cached answer for `key`, or `build()`'s, stored for as long as the index does not
        move."""
        version = self._version(session)
        hit = self._entries.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        data = build()
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = (version, data)
            while len(self._entries) > self.size:
                del self._entries[next(iter(self._entries))]
        return data

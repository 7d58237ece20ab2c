"""The daemon's SQLite journal: units seen, work queued and posted, and how far the chain was read.

Everything the daemon learns from one poll is written in one transaction together with the
block the next poll starts from, so a restart neither replays nor skips an event; every piece
of work moves through its states here, so a restart neither re-posts nor forgets a verdict.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from marketplace.chain.ledger import CommittedUnit

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS units (
    job INTEGER, slot INTEGER, idx INTEGER, block INTEGER, log_index INTEGER,
    provider TEXT, cid TEXT, state_hash BLOB, gpu_seconds INTEGER,
    amount TEXT, remaining_before TEXT, committed_at INTEGER,
    PRIMARY KEY (job, slot, idx, block, log_index)
);
CREATE TABLE IF NOT EXISTS work (
    kind TEXT, job INTEGER, slot INTEGER, idx INTEGER, block INTEGER, log_index INTEGER,
    state TEXT NOT NULL, task_id TEXT, passed INTEGER, evidence_cid TEXT, note TEXT,
    PRIMARY KEY (kind, job, slot, idx, block, log_index)
);
CREATE TABLE IF NOT EXISTS jobs (job INTEGER PRIMARY KEY, spec_cid TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS slots (
    job INTEGER, slot INTEGER, provider TEXT, PRIMARY KEY (job, slot)
);
"""

# Work kinds: a sampled unit's first result, or the second opinion on someone else's failure.
RESULT, DISPUTE = "result", "dispute"
# Work states, in order: NEW (sample not drawn yet / dispute not queued), QUEUED (a worker has it),
# READY (verdict in hand), POSTING (transaction sent), then one of the final states.
NEW, QUEUED, READY, POSTING = "new", "queued", "ready", "posting"
POSTED, SKIPPED, DROPPED = "posted", "skipped", "dropped"


@dataclass(frozen=True)
class Work:
    kind: str
    unit: CommittedUnit
    log_index: int
    state: str
    task_id: str | None
    passed: bool | None
    evidence_cid: str | None


class Journal:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # --- the chain cursor ----------------------------------------------------------------

    def next_block(self, default: int) -> int:
        row = self.db.execute("SELECT value FROM meta WHERE key = 'next_block'").fetchone()
        return int(row[0]) if row else default

    def set_next_block(self, block: int) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('next_block', ?)", (str(block),))

    # --- jobs ---------------------------------------------------------------------------

    def add_job(self, job: int, spec_cid: str) -> None:
        """The spec CID is only in the JobCreated event, so the journal keeps it."""
        self.db.execute("INSERT OR IGNORE INTO jobs VALUES (?, ?)", (job, spec_cid))

    def spec_cid(self, job: int) -> str | None:
        row = self.db.execute("SELECT spec_cid FROM jobs WHERE job = ?", (job,)).fetchone()
        return row[0] if row else None

    # --- committed units -----------------------------------------------------------------

    def add_unit(self, unit: CommittedUnit, log_index: int) -> None:
        self.db.execute(
            "INSERT OR IGNORE INTO units VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                unit.job_id,
                unit.slot,
                unit.index,
                unit.block_number,
                log_index,
                unit.provider,
                unit.cid,
                unit.state_hash,
                unit.gpu_seconds,
                str(unit.amount),
                str(unit.remaining_before),
                unit.committed_at,
            ),
        )

    def latest_unit(
        self, job: int, slot: int, index: int, at_block: int
    ) -> tuple[CommittedUnit, int] | None:
        """The last commitment of unit `index` of the slot up to `at_block`, and its log index.

        After a rollback a slot's index is committed again; what counts for a later unit or a
        dispute is the commitment that was live at that block.
        """
        row = self.db.execute(
            "SELECT * FROM units WHERE job = ? AND slot = ? AND idx = ? AND block <= ? "
            "ORDER BY block DESC, log_index DESC LIMIT 1",
            (job, slot, index, at_block),
        ).fetchone()
        return (_unit(row), row[4]) if row else None

    # --- work ----------------------------------------------------------------------------

    def add_work(self, kind: str, unit: CommittedUnit, log_index: int) -> None:
        self.db.execute(
            "INSERT OR IGNORE INTO work (kind, job, slot, idx, block, log_index, state) "
            "VALUES (?,?,?,?,?,?,?)",
            (kind, unit.job_id, unit.slot, unit.index, unit.block_number, log_index, NEW),
        )

    def redraw(self, kind: str, unit: CommittedUnit, log_index: int) -> None:
        """Draw a unit skipped as unsampled again: it was flagged since."""
        self.db.execute(
            "UPDATE work SET state = ?, note = 'flagged' WHERE state = ? AND kind = ? AND job = ? "
            "AND slot = ? AND idx = ? AND block = ? AND log_index = ?",
            (NEW, SKIPPED, kind, unit.job_id, unit.slot, unit.index, unit.block_number, log_index),
        )

    def work(self, *states: str) -> list[Work]:
        marks = ",".join("?" * len(states))
        rows = self.db.execute(
            "SELECT w.kind, w.state, w.task_id, w.passed, w.evidence_cid, u.* "
            "FROM work w JOIN units u "
            "USING (job, slot, idx, block, log_index) "
            f"WHERE w.state IN ({marks}) ORDER BY u.block, u.log_index",
            states,
        ).fetchall()
        return [
            Work(
                kind=r[0],
                unit=_unit(r[5:]),
                log_index=r[9],
                state=r[1],
                task_id=r[2],
                passed=None if r[3] is None else bool(r[3]),
                evidence_cid=r[4],
            )
            for r in rows
        ]

    def update(
        self,
        work: Work,
        state: str,
        *,
        task_id: str | None = None,
        passed: bool | None = None,
        evidence_cid: str | None = None,
        note: str | None = None,
    ) -> None:
        u = work.unit
        self.db.execute(
            "UPDATE work SET state = ?, task_id = coalesce(?, task_id), "
            "passed = coalesce(?, passed), "
            "evidence_cid = coalesce(?, evidence_cid), note = coalesce(?, note) "
            "WHERE kind = ? AND job = ? AND slot = ? AND idx = ? AND block = ? AND log_index = ?",
            (
                state,
                task_id,
                passed,
                evidence_cid,
                note,
                work.kind,
                u.job_id,
                u.slot,
                u.index,
                u.block_number,
                work.log_index,
            ),
        )

    def states(self) -> dict[tuple[str, int, int, int], str]:
        """(kind, job, slot, index) -> state of the latest work of each, for status and tests."""
        rows = self.db.execute(
            "SELECT kind, job, slot, idx, state FROM work ORDER BY block, log_index"
        ).fetchall()
        return {tuple(r[:4]): r[4] for r in rows}

    # --- slots held, for downtime reports ------------------------------------------------

    def hold_slot(self, job: int, slot: int, provider: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO slots VALUES (?,?,?)", (job, slot, provider))

    def release_slot(self, job: int, slot: int) -> None:
        self.db.execute("DELETE FROM slots WHERE job = ? AND slot = ?", (job, slot))

    def release_job(self, job: int) -> None:
        self.db.execute("DELETE FROM slots WHERE job = ?", (job,))

    def held_slots(self) -> list[tuple[int, int]]:
        return self.db.execute("SELECT job, slot FROM slots ORDER BY job, slot").fetchall()


def _unit(row) -> CommittedUnit:
    job, slot, idx, block, _, provider, cid, state_hash, gpu_seconds, amount, remaining, at = row
    return CommittedUnit(
        job_id=job,
        slot=slot,
        index=idx,
        provider=provider,
        cid=cid,
        state_hash=bytes(state_hash),
        gpu_seconds=gpu_seconds,
        amount=int(amount),
        remaining_before=int(remaining),
        committed_at=at,
        block_number=block,
    )

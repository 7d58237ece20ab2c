"""The verifier's SQLite journal: jobs, units seen, and each piece of work from its draw to its
post.

It extends the runtime's journal (event cursor, outbox, payouts): what the daemon learns from one
poll lands in one transaction with the block the next poll starts from, so a restart neither
replays nor skips an event; every piece of work moves through its states here and is posted
through the outbox under its own key, so a restart neither re-posts nor forgets a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from marketplace.chain.ledger import CommittedUnit
from marketplace.protocol.round_signatures import SlotEvent, Tenure, slot_tenures
from marketplace.runtime.journal import JournalDB

SCHEMA = """
CREATE TABLE IF NOT EXISTS units (
    job_id INTEGER, slot INTEGER, idx INTEGER, block INTEGER, log_index INTEGER,
    provider TEXT, cid TEXT, state_hash BLOB, gpu_seconds INTEGER,
    amount TEXT, remaining_before TEXT, committed_at INTEGER,
    PRIMARY KEY (job_id, slot, idx, block, log_index)
);
CREATE TABLE IF NOT EXISTS work (
    kind TEXT, job_id INTEGER, slot INTEGER, idx INTEGER, block INTEGER, log_index INTEGER,
    state TEXT NOT NULL, task_id TEXT, passed INTEGER, evidence_cid TEXT, note TEXT,
    PRIMARY KEY (kind, job_id, slot, idx, block, log_index)
);
CREATE TABLE IF NOT EXISTS jobs (job_id INTEGER PRIMARY KEY, spec_cid TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS slots (
    job_id INTEGER, slot INTEGER, provider TEXT, PRIMARY KEY (job_id, slot)
);
-- every unit rejected (the slot does it again from there), as the chain's UnitRejected says
CREATE TABLE IF NOT EXISTS rejections (
    job_id INTEGER, slot INTEGER, idx INTEGER, block INTEGER, log_index INTEGER,
    PRIMARY KEY (job_id, slot, idx, block, log_index)
);
-- every provider that left a slot (removed, or released after a rejection), and when
CREATE TABLE IF NOT EXISTS departures (
    job_id INTEGER, slot INTEGER, provider TEXT, block INTEGER, log_index INTEGER,
    PRIMARY KEY (job_id, slot, provider, block, log_index)
);
-- every assignment of a slot: to whom, at which block
CREATE TABLE IF NOT EXISTS holders (
    job_id INTEGER, slot INTEGER, provider TEXT, block INTEGER,
    PRIMARY KEY (job_id, slot, provider, block)
);
-- a registration's benchmark report, from the event to the attestation (or its rejection)
CREATE TABLE IF NOT EXISTS admissions (
    provider TEXT, attestation BLOB, state TEXT NOT NULL, fetches INTEGER NOT NULL DEFAULT 0,
    next_try REAL NOT NULL DEFAULT 0, note TEXT, PRIMARY KEY (provider, attestation)
);
"""

# Work kinds: a sampled unit's first result, or the second opinion on someone else's failure.
RESULT, DISPUTE = "result", "dispute"
# Work states, in order: NEW (sample not drawn yet / dispute not queued), QUEUED (a worker has it),
# READY (verdict in hand: posted through the outbox under `Work.key`), then one of the final states.
NEW, QUEUED, READY = "new", "queued", "ready"
POSTED, SKIPPED, DROPPED = "posted", "skipped", "dropped"
# Admission states: PENDING until the report is judged, then ATTESTED or REJECTED.
PENDING, ATTESTED, REJECTED = "pending", "attested", "rejected"


@dataclass(frozen=True)
class Work:
    kind: str
    unit: CommittedUnit
    log_index: int
    state: str
    task_id: str | None
    passed: bool | None
    evidence_cid: str | None

    @property
    def key(self) -> str:
        """The outbox key of this work's answer: one transaction per commitment judged."""
        u = self.unit
        return f"{self.kind}:{u.job_id}:{u.slot}:{u.index}:{u.block_number}:{self.log_index}"

    @property
    def verdict(self) -> tuple[bool, str]:
        """The verdict in hand from READY on: whether the unit passed, and its evidence's CID."""
        if self.passed is None or self.evidence_cid is None:
            raise ValueError(f"work {self.key} ({self.state}) holds no verdict")
        return self.passed, self.evidence_cid


class Journal(JournalDB):
    """The verifier's jobs, units, work and held slots, beside the runtime's cursor, outbox and
    payouts."""

    ROLE_SCHEMA = SCHEMA
    # 4: rejections are kept; a journal without those of its past would hold a slot's holders
    # to later tenure starts than they had. 5: departures and every assignment are kept;
    # without those, a journal would hold former holders to no tenure end, or one assigned the
    # slot again to the end of its first tenure
    LAYOUT = JournalDB.LAYOUT + 2

    # --- jobs ---------------------------------------------------------------------------

    def add_job(self, job_id: int, spec_cid: str) -> None:
        """The spec CID is only in the JobCreated event, so the journal keeps it."""
        self._run("INSERT OR IGNORE INTO jobs VALUES (?, ?)", job_id, spec_cid)

    def spec_cid(self, job_id: int) -> str | None:
        rows = self._run("SELECT spec_cid FROM jobs WHERE job_id = ?", job_id)
        return rows[0][0] if rows else None

    # --- committed units -----------------------------------------------------------------

    def add_unit(self, unit: CommittedUnit, log_index: int) -> None:
        self._run(
            "INSERT OR IGNORE INTO units VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
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
        )

    def latest_unit(
        self, job_id: int, slot: int, index: int, at_block: int
    ) -> tuple[CommittedUnit, int] | None:
        """The last commitment of unit `index` of the slot up to `at_block`, and its log index.

        After a rollback a slot's index is committed again; what counts for a later unit or a
        dispute is the commitment that was live at that block.
        """
        rows = self._run(
            "SELECT * FROM units WHERE job_id = ? AND slot = ? AND idx = ? AND block <= ? "
            "ORDER BY block DESC, log_index DESC LIMIT 1",
            job_id,
            slot,
            index,
            at_block,
        )
        return (_unit(rows[0]), rows[0][4]) if rows else None

    def slot_tenures(self, job_id: int, slot: int, at_block: int) -> dict[str, Tenure]:
        """Every provider that held the slot up to `at_block` (each it was assigned to, whether
        or not it committed anything, and each that committed a unit: a journal begun before
        assignments were kept has only those) -> the units whose exchanges it could have
        signed for the slot (`round_signatures.slot_tenures`)."""
        rows = self._run(
            "SELECT block, 0, 0, 'assigned', provider, 0 FROM holders "
            "WHERE job_id = ? AND slot = ? AND block <= ? "
            "UNION ALL "
            "SELECT block, 1, log_index, 'committed', provider, idx FROM units "
            "WHERE job_id = ? AND slot = ? AND block <= ? "
            "UNION ALL "
            "SELECT block, 1, log_index, 'rejected', '', idx FROM rejections "
            "WHERE job_id = ? AND slot = ? AND block <= ? "
            "UNION ALL "
            "SELECT block, -1, log_index, 'left', provider, 0 FROM departures "
            "WHERE job_id = ? AND slot = ? AND block <= ? "
            "ORDER BY 1, 2, 3",
            *(job_id, slot, at_block) * 4,
        )
        first_commits = self._run(
            "SELECT idx, MIN(block) FROM units WHERE job_id = ? AND block <= ? GROUP BY idx",
            job_id,
            at_block,
        )
        return slot_tenures(
            (
                SlotEvent(kind, provider, index, block)
                for block, _, _, kind, provider, index in rows
            ),
            dict(first_commits),
        )

    def reject_unit(self, job_id: int, slot: int, index: int, block: int, log_index: int) -> None:
        """The slot's unit `index` was rejected at `block`: the slot does it again."""
        self._run(
            "INSERT OR IGNORE INTO rejections VALUES (?,?,?,?,?)",
            job_id,
            slot,
            index,
            block,
            log_index,
        )

    # --- work ----------------------------------------------------------------------------

    def add_work(self, kind: str, unit: CommittedUnit, log_index: int) -> None:
        self._run(
            "INSERT OR IGNORE INTO work (kind, job_id, slot, idx, block, log_index, state) "
            "VALUES (?,?,?,?,?,?,?)",
            kind,
            unit.job_id,
            unit.slot,
            unit.index,
            unit.block_number,
            log_index,
            NEW,
        )

    def redraw(self, kind: str, unit: CommittedUnit, log_index: int) -> None:
        """Draw a unit skipped as unsampled, or dropped as too late, again: it was flagged since."""
        self._run(
            "UPDATE work SET state = ?, note = 'flagged' "
            "WHERE state IN (?, ?) AND kind = ? AND job_id = ? "
            "AND slot = ? AND idx = ? AND block = ? AND log_index = ?",
            NEW,
            SKIPPED,
            DROPPED,
            kind,
            unit.job_id,
            unit.slot,
            unit.index,
            unit.block_number,
            log_index,
        )

    def work(self, *states: str) -> list[Work]:
        marks = ",".join("?" * len(states))
        rows = self._run(
            "SELECT w.kind, w.state, w.task_id, w.passed, w.evidence_cid, u.* "
            "FROM work w JOIN units u USING (job_id, slot, idx, block, log_index) "
            f"WHERE w.state IN ({marks}) ORDER BY u.block, u.log_index",
            *states,
        )
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
        self._run(
            "UPDATE work SET state = ?, task_id = coalesce(?, task_id), "
            "passed = coalesce(?, passed), evidence_cid = coalesce(?, evidence_cid), "
            "note = coalesce(?, note) "
            "WHERE kind = ? AND job_id = ? AND slot = ? AND idx = ? "
            "AND block = ? AND log_index = ?",
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
        )

    def states(self) -> dict[tuple[str, int, int, int], str]:
        """(kind, job, slot, index) -> state of the latest work of each, for status and tests."""
        rows = self._run(
            "SELECT kind, job_id, slot, idx, state FROM work ORDER BY block, log_index"
        )
        return {tuple(r[:4]): r[4] for r in rows}

    # --- benchmark admissions -------------------------------------------------------------

    def add_admission(self, provider: str, attestation: bytes) -> None:
        self._run(
            "INSERT OR IGNORE INTO admissions (provider, attestation, state) VALUES (?, ?, ?)",
            provider,
            attestation,
            PENDING,
        )

    def admissions(self, state: str, due_by: float = float("inf")) -> list[tuple[str, bytes]]:
        """Admissions in `state` (pending ones only once their next try is due by `due_by`)."""
        rows = self._run(
            "SELECT provider, attestation FROM admissions WHERE state = ? AND next_try <= ? "
            "ORDER BY rowid",
            state,
            due_by,
        )
        return [(provider, bytes(attestation)) for provider, attestation in rows]

    def judge_admission(self, provider: str, attestation: bytes, state: str, note: str) -> None:
        self._run(
            "UPDATE admissions SET state = ?, note = ? WHERE provider = ? AND attestation = ?",
            state,
            note,
            provider,
            attestation,
        )

    def failed_fetch(self, provider: str, attestation: bytes, now: float, backoff: float) -> int:
        """Count a fetch of the report that did not come back; the next try is `backoff`
        seconds after `now`, doubling with each failure. Returns the fetches failed so far."""
        self._run(
            "UPDATE admissions SET fetches = fetches + 1, next_try = ? + ? * (1 << fetches) "
            "WHERE provider = ? AND attestation = ?",
            now,
            backoff,
            provider,
            attestation,
        )
        [(fetches,)] = self._run(
            "SELECT fetches FROM admissions WHERE provider = ? AND attestation = ?",
            provider,
            attestation,
        )
        return int(fetches)

    # --- slots held, for downtime reports ------------------------------------------------

    def hold_slot(self, job_id: int, slot: int, provider: str, block: int) -> None:
        """`provider` holds the slot from `block` on: its downtime is reportable, and what it
        signs for the group is its slot's (`slot_tenures`)."""
        self._run("INSERT OR REPLACE INTO slots VALUES (?,?,?)", job_id, slot, provider)
        self._run("INSERT OR IGNORE INTO holders VALUES (?,?,?,?)", job_id, slot, provider, block)

    def release_slot(self, job_id: int, slot: int) -> None:
        self._run("DELETE FROM slots WHERE job_id = ? AND slot = ?", job_id, slot)

    def leave_slot(self, job_id: int, slot: int, provider: str, block: int, log_index: int) -> None:
        """`provider` left the slot at `block` (removed, or released after a rejection): what
        it signs for the group stands for a while only (`slot_tenures`)."""
        self.release_slot(job_id, slot)
        self._run(
            "INSERT OR IGNORE INTO departures VALUES (?,?,?,?,?)",
            job_id,
            slot,
            provider,
            block,
            log_index,
        )

    def release_job(self, job_id: int) -> None:
        self._run("DELETE FROM slots WHERE job_id = ?", job_id)

    def held_slots(self) -> list[tuple[int, int]]:
        return self._run("SELECT job_id, slot FROM slots ORDER BY job_id, slot")


def _unit(row) -> CommittedUnit:
    job_id, slot, idx, block, _, provider, cid, state_hash, gpu_seconds, amount, remaining, at = row
    return CommittedUnit(
        job_id=job_id,
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

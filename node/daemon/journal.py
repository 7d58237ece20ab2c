"""The provider's local journal (SQLite): what it must remember across a crash that the chain cannot
tell it."""

from __future__ import annotations

from dataclasses import dataclass

from marketplace.runtime.journal import JournalDB

SCHEMA = """
CREATE TABLE IF NOT EXISTS auctions (
    job_id INTEGER, round INTEGER, bid_deadline INTEGER, reveal_deadline INTEGER,
    state TEXT NOT NULL DEFAULT 'open',  -- open | skipped | closed
    PRIMARY KEY (job_id, round));
CREATE TABLE IF NOT EXISTS bids (
    job_id INTEGER, round INTEGER, price TEXT NOT NULL, salt BLOB NOT NULL,
    commitment BLOB NOT NULL, PRIMARY KEY (job_id, round));
CREATE TABLE IF NOT EXISTS slots (
    job_id INTEGER, slot INTEGER,
    state TEXT NOT NULL DEFAULT 'held',  -- held | finished | lost
    PRIMARY KEY (job_id, slot));
CREATE TABLE IF NOT EXISTS units (
    job_id INTEGER, slot INTEGER, idx INTEGER, cid TEXT NOT NULL, state_hash TEXT NOT NULL,
    seconds REAL NOT NULL,  -- wall-clock seconds the unit trained, what it meters
    PRIMARY KEY (job_id, slot, idx));
"""


@dataclass(frozen=True)
class Auction:
    job_id: int
    round: int
    bid_deadline: int
    reveal_deadline: int


@dataclass(frozen=True)
class Bid:
    job_id: int
    round: int
    price: int
    salt: bytes
    commitment: bytes


@dataclass(frozen=True)
class Unit:
    """A trained checkpoint, recorded once it is on this node's IPFS node and before it is pinned
    on the replicas and committed, so a crash never loses it nor has it trained twice."""

    job_id: int
    slot: int
    index: int
    cid: str
    state_hash: str
    seconds: float


class Journal(JournalDB):
    """The provider's auctions, bids, slots and units, beside the runtime's cursor, outbox and
    payouts."""

    ROLE_SCHEMA = SCHEMA

    # --- auctions and bids ------------------------------------------------------------------

    def add_auction(self, auction: Auction) -> None:
        self._run(
            "INSERT OR IGNORE INTO auctions (job_id, round, bid_deadline, reveal_deadline) "
            "VALUES (?, ?, ?, ?)",
            auction.job_id,
            auction.round,
            auction.bid_deadline,
            auction.reveal_deadline,
        )

    def open_auctions(self) -> list[Auction]:
        rows = self._run(
            "SELECT job_id, round, bid_deadline, reveal_deadline FROM auctions "
            "WHERE state = 'open' ORDER BY job_id, round"
        )
        return [Auction(*row) for row in rows]

    def end_auction(self, job_id: int, round_: int, state: str) -> None:
        self._run(
            "UPDATE auctions SET state = ? WHERE job_id = ? AND round = ?", state, job_id, round_
        )

    def add_bid(self, bid: Bid) -> None:
        """Recorded before the commit transaction exists, so a crash can never orphan its salt."""
        self._run(
            "INSERT INTO bids VALUES (?, ?, ?, ?, ?)",
            bid.job_id,
            bid.round,
            str(bid.price),
            bid.salt,
            bid.commitment,
        )

    def bid(self, job_id: int, round_: int) -> Bid | None:
        rows = self._run(
            "SELECT job_id, round, price, salt, commitment FROM bids "
            "WHERE job_id = ? AND round = ?",
            job_id,
            round_,
        )
        if not rows:
            return None
        job, rnd, price, salt, commitment = rows[0]
        return Bid(job, rnd, int(price), bytes(salt), bytes(commitment))

    # --- slots and units ----------------------------------------------------------------------

    def hold_slot(self, job_id: int, slot: int) -> None:
        self._run("INSERT OR REPLACE INTO slots VALUES (?, ?, 'held')", job_id, slot)

    def end_slot(self, job_id: int, slot: int, state: str) -> None:
        self._run("UPDATE slots SET state = ? WHERE job_id = ? AND slot = ?", state, job_id, slot)

    def held_slots(self) -> list[tuple[int, int]]:
        return self._run(
            "SELECT job_id, slot FROM slots WHERE state = 'held' ORDER BY job_id, slot"
        )

    def worked_jobs(self) -> list[int]:
        """Jobs this provider held a slot in whose pay it has not yet withdrawn."""
        rows = self._run(
            "SELECT DISTINCT job_id FROM slots WHERE job_id NOT IN "
            "(SELECT job_id FROM payouts WHERE state = 'withdrawn') ORDER BY job_id"
        )
        return [row[0] for row in rows]

    def add_unit(self, unit: Unit) -> None:
        self._run(
            "INSERT OR REPLACE INTO units VALUES (?, ?, ?, ?, ?, ?)",
            unit.job_id,
            unit.slot,
            unit.index,
            unit.cid,
            unit.state_hash,
            unit.seconds,
        )

    def units_from(self, job_id: int, slot: int, index: int) -> list[Unit]:
        """The slot's journaled units from `index` on, in order."""
        rows = self._run(
            "SELECT job_id, slot, idx, cid, state_hash, seconds FROM units "
            "WHERE job_id = ? AND slot = ? AND idx >= ? ORDER BY idx",
            job_id,
            slot,
            index,
        )
        return [Unit(*row) for row in rows]

    def drop_units(self, job_id: int, slot: int, index: int) -> None:
        """Forget the slot's units from `index` on: they are to be trained again."""
        self._run(
            "DELETE FROM units WHERE job_id = ? AND slot = ? AND idx >= ?", job_id, slot, index
        )

    def unit(self, job_id: int, slot: int, index: int) -> Unit | None:
        rows = self._run(
            "SELECT job_id, slot, idx, cid, state_hash, seconds FROM units "
            "WHERE job_id = ? AND slot = ? AND idx = ?",
            job_id,
            slot,
            index,
        )
        return Unit(*rows[0]) if rows else None

"""The gateway's database: one append-only table per kind of ledger event, plus the indexer's
cursor."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Integer,
    String,
    TypeDecorator,
    UniqueConstraint,
    create_engine,
    event,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column, sessionmaker

from marketplace.config import Settings


class Wei(TypeDecorator):
    """A uint256 amount, stored as decimal text: SQLite's integers stop at 2**63 and a wei sum must
    not round."""

    impl = String(78)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return None if value is None else str(value)

    def process_result_value(self, value, dialect):
        return None if value is None else int(value)


class Base(DeclarativeBase):
    pass


class EventRow:
    """Where a row came from. Every row is written by exactly one log, so a reorg deletes rows by
    block."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    block_number: Mapped[int] = mapped_column(BigInteger, index=True)
    log_index: Mapped[int] = mapped_column(Integer)
    tx_hash: Mapped[str] = mapped_column(String(66))

    @declared_attr.directive
    def __table_args__(cls):
        return (UniqueConstraint("block_number", "log_index"),)


class Job(EventRow, Base):
    """A job as `JobCreated` announced it; its later life is in the tables that point to it."""

    __tablename__ = "jobs"
    job_id: Mapped[int] = mapped_column(BigInteger, unique=True)
    user: Mapped[str] = mapped_column(String(42), index=True)
    tier: Mapped[int] = mapped_column(Integer)
    spec_cid: Mapped[str] = mapped_column(String)
    nodes: Mapped[int] = mapped_column(Integer)
    units_per_node: Mapped[int] = mapped_column(Integer)
    unit_gpu_seconds: Mapped[int] = mapped_column(BigInteger)  # what one unit is worth
    max_price: Mapped[int] = mapped_column(Wei)
    budget: Mapped[int] = mapped_column(Wei)
    collateral: Mapped[int] = mapped_column(Wei)


class JobStatusChange(EventRow, Base):
    """A job's status as of one event; the latest row is the job's status."""

    __tablename__ = "job_status_changes"
    job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    status: Mapped[str] = mapped_column(String(16))


class Bid(EventRow, Base):
    """A sealed bid's commitment, or its reveal with the price."""

    __tablename__ = "bids"
    job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    provider: Mapped[str] = mapped_column(String(42), index=True)
    commitment: Mapped[str | None] = mapped_column(String(66))
    price: Mapped[int | None] = mapped_column(Wei)


class Auction(EventRow, Base):
    """The end of an auction round: cleared at a uniform price, or failed for want of bids."""

    __tablename__ = "auctions"
    job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    round: Mapped[int] = mapped_column(Integer)
    cleared: Mapped[bool] = mapped_column(Boolean)
    clearing_price: Mapped[int | None] = mapped_column(Wei)
    count: Mapped[int] = mapped_column(Integer)  # winners if cleared, valid bids if failed


class Slot(EventRow, Base):
    __tablename__ = "slots"
    job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    slot: Mapped[int] = mapped_column(Integer)
    provider: Mapped[str] = mapped_column(String(42), index=True)
    price: Mapped[int | None] = mapped_column(Wei)  # None on ProviderRemoved rows
    removed_reason: Mapped[str | None] = mapped_column(
        String(32)
    )  # set only on ProviderRemoved rows, and "Released" on SlotReleased rows


class Unit(EventRow, Base):
    """A committed work unit: its checkpoint, the reference GPU-seconds it is paid for and the pay
    it accrued."""

    __tablename__ = "units"
    job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    slot: Mapped[int] = mapped_column(Integer)
    index: Mapped[int] = mapped_column(Integer)
    provider: Mapped[str] = mapped_column(String(42))
    cid: Mapped[str] = mapped_column(String)
    state_hash: Mapped[str] = mapped_column(String(66))
    gpu_seconds: Mapped[int] = mapped_column(BigInteger)
    amount: Mapped[int] = mapped_column(Wei)
    remaining_before: Mapped[int] = mapped_column(Wei)


class Rollback(EventRow, Base):
    """A unit confirmed wrong: it and every later unit of its slot committed before this row are
    void, and its provider's pay from it on went back into the slot's budget."""

    __tablename__ = "rollbacks"
    job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    slot: Mapped[int] = mapped_column(Integer)
    index: Mapped[int] = mapped_column(Integer)
    clawed_back: Mapped[int] = mapped_column(Wei)


class Result(EventRow, Base):
    """A verifier's verdict on a sampled unit, or a dispute's opening, resolution or expiry."""

    __tablename__ = "results"
    job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    slot: Mapped[int] = mapped_column(Integer)
    index: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))  # result, dispute, resolved, expired
    account: Mapped[str | None] = mapped_column(String(42))
    passed: Mapped[bool | None] = mapped_column(Boolean)  # result: pass; resolved: failure refuted
    evidence_cid: Mapped[str | None] = mapped_column(String)


class Settlement(EventRow, Base):
    __tablename__ = "settlements"
    job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    payment: Mapped[int] = mapped_column(Wei)
    fee: Mapped[int] = mapped_column(Wei)
    refund: Mapped[int] = mapped_column(Wei)
    verifier_pool: Mapped[int] = mapped_column(Wei)
    cancelled: Mapped[bool] = mapped_column(Boolean)  # a cancellation: the whole budget refunded


class Slash(EventRow, Base):
    __tablename__ = "slashes"
    account: Mapped[str] = mapped_column(String(42), index=True)
    reason: Mapped[str] = mapped_column(String(32))
    amount: Mapped[int] = mapped_column(Wei)
    reporter: Mapped[str] = mapped_column(String(42))
    reporter_share: Mapped[int] = mapped_column(Wei)


class Provider(EventRow, Base):
    """A provider's registration; a later one replaces its tier and hardware."""

    __tablename__ = "providers"
    address: Mapped[str] = mapped_column(String(42), index=True)
    tier: Mapped[int] = mapped_column(Integer)
    gpu_model: Mapped[str] = mapped_column(String)
    gpus: Mapped[int] = mapped_column(BigInteger)
    endpoint: Mapped[str] = mapped_column(String)


class StakeChange(EventRow, Base):
    """One move of an account's stake: staked, unstake (to unbonding), withdrawn, slashed, locked,
    unlocked."""

    __tablename__ = "stake_changes"
    account: Mapped[str] = mapped_column(String(42), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    amount: Mapped[int] = mapped_column(Wei)


class TreasuryTransfer(EventRow, Base):
    """ZEN into (`incoming`) or out of the treasury, so its balance is a sum of indexed rows."""

    __tablename__ = "treasury_transfers"
    counterparty: Mapped[str] = mapped_column(String(42))
    incoming: Mapped[bool] = mapped_column(Boolean)
    amount: Mapped[int] = mapped_column(Wei)


class RegistryVersion(EventRow, Base):
    """A version published to the registry (`VersionPublished`); the first of a name made its
    publisher the owner."""

    __tablename__ = "registry_versions"
    kind: Mapped[str] = mapped_column(String(8))  # model or dataset
    name: Mapped[str] = mapped_column(String(96), index=True)
    version: Mapped[int] = mapped_column(BigInteger)
    cid: Mapped[str] = mapped_column(String(128))
    license: Mapped[str] = mapped_column(String(64))
    metadata_cid: Mapped[str | None] = mapped_column(String(128), nullable=True)
    parent_name: Mapped[str | None] = mapped_column(String(96), nullable=True)
    parent_version: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    job_id: Mapped[int | None] = mapped_column(Wei, nullable=True)
    publisher: Mapped[str] = mapped_column(String(42))


class RegistryTransfer(EventRow, Base):
    """A registry name handed to a new owner (`NameTransferred`)."""

    __tablename__ = "registry_transfers"
    kind: Mapped[str] = mapped_column(String(8))
    name: Mapped[str] = mapped_column(String(96), index=True)
    new_owner: Mapped[str] = mapped_column(String(42))


EVENT_TABLES: tuple[type[EventRow], ...] = (
    Job,
    JobStatusChange,
    Bid,
    Auction,
    Slot,
    Unit,
    Rollback,
    Result,
    Settlement,
    Slash,
    Provider,
    StakeChange,
    TreasuryTransfer,
    RegistryVersion,
    RegistryTransfer,
)


class IndexedBlock(Base):
    """The hash of the last block of each indexed batch: where a reorg is found and how far it
    reaches."""

    __tablename__ = "indexed_blocks"
    number: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    hash: Mapped[str] = mapped_column(String(66))


class IndexerState(Base):
    """The one cursor row: the next block to read and the hash of the last block read."""

    __tablename__ = "indexer_state"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    chain_id: Mapped[int] = mapped_column(BigInteger)
    next_block: Mapped[int] = mapped_column(BigInteger)
    last_block_hash: Mapped[str | None] = mapped_column(String(66))


class SignInNonce(Base):
    """A nonce a signed-in message spent, kept until it expires so it signs in once. Nonces handed
    out are not stored: they carry their expiry and a MAC (marketplace.gateway.auth)."""

    __tablename__ = "spent_sign_in_nonces"
    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[int] = mapped_column(BigInteger)  # unix seconds


class UploadSpend(Base):
    """Bytes a wallet uploaded through the gateway on one UTC day, against its daily quota."""

    __tablename__ = "upload_spend"
    address: Mapped[str] = mapped_column(String(42), primary_key=True)
    day: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # unix day number
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)


class GatewaySecret(Base):
    """A random key the gateway's processes share through the database (e.g. the one that MACs
    sign-in nonces), made by the first process that needs it."""

    __tablename__ = "gateway_secrets"
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[str] = mapped_column(String(64))


class AuthSession(Base):
    """A signed-in wallet. Only the token's sha256 is kept, so a leaked database opens no
    session."""

    __tablename__ = "auth_sessions"
    token_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    address: Mapped[str] = mapped_column(String(42))
    expires_at: Mapped[int] = mapped_column(BigInteger, index=True)  # unix seconds


class JobLog(Base):
    """A line of a job's log, posted by its user or one of its providers; `id` orders and pages
    them."""

    __tablename__ = "job_logs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    author: Mapped[str] = mapped_column(String(42))
    posted_at: Mapped[int] = mapped_column(BigInteger)  # unix seconds
    line: Mapped[str] = mapped_column(String)


class CheckpointFacts(Base):
    """What reading a checkpoint from IPFS told: its state hash and training metrics. Content never
    changes under a CID, so each checkpoint is fetched once."""

    __tablename__ = "checkpoint_facts"
    cid: Mapped[str] = mapped_column(String, primary_key=True)
    state_hash: Mapped[str] = mapped_column(String(66))
    metrics: Mapped[dict] = mapped_column(JSON)


def database_url(settings: Settings) -> str:
    """ZOO_DATABASE_URL (any SQLAlchemy URL, e.g. PostgreSQL), else a SQLite file under the home."""
    return settings.database_url or f"sqlite:///{Path(settings.home) / 'gateway.sqlite3'}"


def open_database(url: str) -> sessionmaker:
    """An engine on `url` with every table created, as a session factory."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    _create_tables(engine)
    return sessionmaker(engine, expire_on_commit=False)


def _create_tables(engine, tries: int = 20) -> None:
    """Create the missing tables. The API server and the indexer start together and both create
    the schema: the loser of that race meets a table the winner has just made, or a locked file,
    and looks again."""
    for attempt in range(tries):
        try:
            Base.metadata.create_all(engine)
            return
        except DBAPIError:
            if attempt == tries - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    """WAL lets the API read while the indexer writes. With WAL, synchronous=NORMAL skips the fsync
    of every commit and still never corrupts the file: a power cut can only lose the last batches,
    and since rows and cursor commit together the indexer reads those blocks again."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()

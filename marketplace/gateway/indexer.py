"""Copy the ledger's events into the gateway's database, once each, following reorgs back."""

from __future__ import annotations

import logging
import threading

from sqlalchemy import delete, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from web3 import Web3
from web3.types import EventData

from marketplace.chain.decoder import LedgerDecoder
from marketplace.chain.deploy import Deployment
from marketplace.chain.events import BlockMark, ChainReorganized, EventCursor
from marketplace.config import Settings
from marketplace.errors import ZooError
from marketplace.gateway import db
from marketplace.protocol.terms import JobStatus, Kind, SlashReason
from marketplace.runtime.heads import HeadFeed
from marketplace.runtime.loop import TRANSIENT, run_ticks

log = logging.getLogger(__name__)

CONTRACTS = ("JobMarket", "Staking", "Verification", "Treasury", "ZenToken", "Registry")
STATE_ID = 1


class IndexerError(ZooError):
    """The database does not belong to the chain the indexer is pointed at."""


def _hex(value: bytes) -> str:
    return "0x" + bytes(value).hex()


class Indexer:
    """One `step()` reads every confirmed log since the stored cursor and stores it with the cursor.

    Rows and cursor commit in one transaction, so a crash leaves either both or neither: a restart
    resumes with no gap and no duplicate. The cursor (marketplace/chain/events.py) checks the last
    indexed block's hash before it reads; if the chain moved to another branch, the rows of the
    orphaned blocks are deleted (every row carries its block number) and the blocks are read again.
    Confirmations make it rare for a branch to change under a running step; a change that does
    is found by the next step's check.
    """

    def __init__(
        self,
        w3: Web3,
        deployment: Deployment,
        sessions: sessionmaker,
        confirmations: int = 0,
        keep_blocks: int = 256,
    ):
        self.w3 = w3
        self.deployment = deployment
        self.sessions = sessions
        self.keep_blocks = keep_blocks
        # A manifest from before the registry lacks it; the rest of the ledger indexes as before.
        names = [name for name in CONTRACTS if name in deployment.addresses]
        contracts = [deployment.contract(w3, name) for name in names]
        self._names = {c.address: name for name, c in zip(names, contracts)}
        self.treasury = deployment.addresses["Treasury"]
        self.market = deployment.addresses["JobMarket"]
        self.decoder = LedgerDecoder.of(w3, deployment)
        self.cursor = EventCursor(w3, contracts, deployment.deploy_block, confirmations)
        self._stored: tuple[int, BlockMark | None] | None = None  # the cursor as last committed

    def step(self) -> int:
        """Index what is new; returns how many events were stored."""
        if self._stored == self.cursor.position and self.cursor.standing_still():
            return 0  # nothing new, and the cursor is where the database says: no session
        self._stored = None  # until this step commits
        with self.sessions.begin() as session:
            state = self._state(session)
            last_read = (
                BlockMark(state.next_block - 1, state.last_block_hash)
                if state.last_block_hash
                else None
            )
            self.cursor.seek(state.next_block, last_read)
            try:
                events = self.cursor.poll()
            except ChainReorganized as reorg:
                self._roll_back(session, state, reorg)
                events = self.cursor.poll()
            last = self.cursor.last
            if last is None or self.cursor.next_block == state.next_block:
                self._stored = self.cursor.position
                return 0
            for event in events:
                self._store(session, event)
            state.next_block, state.last_block_hash = self.cursor.next_block, last.hash
            session.merge(db.IndexedBlock(number=last.number, hash=last.hash))
            session.execute(
                delete(db.IndexedBlock).where(
                    db.IndexedBlock.number <= last.number - self.keep_blocks
                )
            )
        self._stored = self.cursor.position
        if events:
            log.info("indexed %d events up to block %d", len(events), last.number)
        return len(events)

    def run(self, interval: float, stop: threading.Event) -> None:
        """Step on each new block (every `interval` seconds while the node pushes none) until
        `stop` is set; an RPC hiccup is logged and retried."""
        with HeadFeed.of(self.w3) as heads:
            self.cursor.heads = heads
            try:
                run_ticks(self.step, stop, interval, "indexer step", heads=heads)
            finally:
                self.cursor.heads = None

    # --- cursor and reorgs ---------------------------------------------------------------

    def _state(self, session: Session) -> db.IndexerState:
        state = session.get(db.IndexerState, STATE_ID)
        if state is None:
            state = db.IndexerState(
                id=STATE_ID,
                chain_id=self.deployment.chain_id,
                next_block=self.deployment.deploy_block,
                last_block_hash=None,
            )
            session.add(state)
        elif state.chain_id != self.deployment.chain_id:
            raise IndexerError(
                f"the database indexes chain {state.chain_id}, not {self.deployment.chain_id}"
            )
        return state

    def _roll_back(self, session: Session, state: db.IndexerState, reorg: ChainReorganized) -> None:
        """Delete everything above the newest indexed block the chain still has, and resume after
        it."""
        indexed = session.scalars(select(db.IndexedBlock).order_by(db.IndexedBlock.number.desc()))
        kept = self.cursor.fork(BlockMark(block.number, block.hash) for block in indexed)
        resume = kept.number + 1 if kept is not None else self.deployment.deploy_block
        for table in db.EVENT_TABLES:
            session.execute(delete(table).where(table.block_number >= resume))
        session.execute(delete(db.IndexedBlock).where(db.IndexedBlock.number >= resume))
        log.warning("%s: rolled back blocks %d..%d", reorg, resume, state.next_block - 1)
        state.next_block, state.last_block_hash = resume, kept.hash if kept is not None else None
        self.cursor.seek(resume, kept)

    # --- events to rows ------------------------------------------------------------------

    def _store(self, session: Session, event: EventData) -> None:
        """Add the rows of `event`, flushed under a savepoint of their own. A failure the network
        or the database may mend aborts the step, and the next one reads the same events; any
        other is logged with the event and the event passed over: one event the index cannot
        hold never stops the index."""
        try:
            with session.begin_nested():
                session.add_all(self._rows(event))
                session.flush()
        except (*TRANSIENT, OperationalError):
            raise
        except Exception:
            log.exception(
                "%s in block %d (log %d) not indexed",
                event["event"],
                event["blockNumber"],
                event["logIndex"],
            )

    def _rows(self, event: EventData) -> list[db.EventRow]:
        handler = _HANDLERS.get((self._names[event["address"]], event["event"]))
        if handler is None:
            return []
        where = {
            "block_number": event["blockNumber"],
            "log_index": event["logIndex"],
            "tx_hash": _hex(event["transactionHash"]),
        }
        return handler(self, event["args"], where)


def open_indexer(settings: Settings) -> Indexer:
    """The indexer of the ledger at ZOO_RPC_URL (manifest: ZOO_MANIFEST) into ZOO_DATABASE_URL."""
    w3 = Web3(Web3.HTTPProvider(settings.rpc_url))
    deployment = settings.deployment(w3.eth.chain_id)
    return Indexer(
        w3, deployment, db.open_database(db.database_url(settings)), settings.confirmations
    )


def _job_created(_, a, where):
    return [
        db.Job(
            job_id=a["jobId"],
            user=a["user"],
            tier=a["tier"],
            spec_cid=a["specCid"],
            nodes=a["nodes"],
            units_per_node=a["unitsPerNode"],
            unit_gpu_seconds=a["unitGpuSeconds"],
            max_price=a["maxPrice"],
            budget=a["budget"],
            collateral=a["collateral"],
            **where,
        ),
        db.JobStatusChange(job_id=a["jobId"], status=JobStatus.OPEN.label, **where),
    ]


def _status(status: JobStatus):
    return lambda _, a, where: [db.JobStatusChange(job_id=a["jobId"], status=status.label, **where)]


def _auction(cleared: bool):
    def rows(_, a, where):
        auction = db.Auction(
            job_id=a["jobId"],
            round=a["round"],
            cleared=cleared,
            clearing_price=a["clearingPrice"] if cleared else None,
            count=a["winners"] if cleared else a["validBids"],
            **where,
        )
        return [auction, *_status(JobStatus.RUNNING)(_, a, where)] if cleared else [auction]

    return rows


def _settled(_, a, where):
    return [
        db.Settlement(
            job_id=a["jobId"],
            payment=a["payment"],
            fee=a["fee"],
            refund=a["refund"],
            verifier_pool=a["verifierPool"],
            cancelled=False,
            **where,
        ),
        db.JobStatusChange(job_id=a["jobId"], status=JobStatus.SETTLED.label, **where),
    ]


def _cancelled(_, a, where):
    return [
        db.Settlement(
            job_id=a["jobId"],
            payment=0,
            fee=0,
            refund=a["refund"],
            verifier_pool=0,
            cancelled=True,
            **where,
        ),
        db.JobStatusChange(job_id=a["jobId"], status=JobStatus.CANCELLED.label, **where),
    ]


def _unit(_, a, where):
    return [
        db.Unit(
            job_id=a["jobId"],
            slot=a["slot"],
            index=a["index"],
            provider=a["provider"],
            cid=a["cid"],
            state_hash=_hex(a["stateHash"]),
            gpu_seconds=a["gpuSeconds"],
            amount=a["amount"],
            remaining_before=a["remainingBefore"],
            **where,
        )
    ]


def _result(kind: str, account: str | None = None, passed=None, evidence: str | None = None):
    def rows(_, a, where):
        return [
            db.Result(
                job_id=a["jobId"],
                slot=a["slot"],
                index=a["index"],
                kind=kind,
                account=a[account] if account else None,
                passed=passed(a) if passed else None,
                evidence_cid=a[evidence] if evidence else None,
                **where,
            )
        ]

    return rows


def _stake(kind: str, account: str = "account"):
    return lambda _, a, where: [
        db.StakeChange(account=a[account], kind=kind, amount=a["amount"], **where)
    ]


def _reason(code: int) -> str:
    """A slash reason as the contracts spell it ("Downtime"), which the API has always shown; a code
    this release does not know, as its number."""
    try:
        return SlashReason(code).contract_name
    except ValueError:
        return str(code)


def _slashed(indexer, a, where):
    return [
        db.Slash(
            account=a["account"],
            reason=_reason(a["reason"]),
            amount=a["amount"],
            reporter=a["reporter"],
            reporter_share=a["reporterShare"],
            **where,
        ),
        *_stake("slashed")(indexer, a, where),
    ]


def _bid_committed(indexer, a, where):
    """The sealed commitment is not in the event (the bid's gas budget is tight): read it from the
    transaction's input, when the bidder called the market directly."""
    tx = indexer.w3.eth.get_transaction(where["tx_hash"])
    commitment = None
    if tx["to"] == indexer.market:
        fn_name, args = indexer.decoder.decode_call(tx["to"], tx["input"])
        if fn_name == "commitBid":
            commitment = _hex(args["commitment"])
    return [
        db.Bid(
            job_id=a["jobId"], provider=a["provider"], commitment=commitment, price=None, **where
        )
    ]


def _transfer(indexer, a, where):
    if indexer.treasury not in (a["from"], a["to"]):
        return []
    incoming = a["to"] == indexer.treasury
    return [
        db.TreasuryTransfer(
            counterparty=a["from"] if incoming else a["to"],
            incoming=incoming,
            amount=a["value"],
            **where,
        )
    ]


def _version_published(_, a, where):
    p = a["publication"]
    return [
        db.RegistryVersion(
            kind=Kind(a["kind"]).label,
            name=a["name"],
            version=a["version"],
            cid=p["cid"],
            license=p["license"],
            metadata_cid=p["metadataCid"] or None,
            parent_name=p["parentName"] or None,
            parent_version=p["parentVersion"] or None,
            job_id=p["jobId"] or None,
            publisher=a["publisher"],
            **where,
        )
    ]


_HANDLERS = {
    ("JobMarket", "JobCreated"): _job_created,
    ("JobMarket", "BidCommitted"): _bid_committed,
    ("JobMarket", "BidRevealed"): lambda _, a, where: [
        db.Bid(
            job_id=a["jobId"], provider=a["provider"], commitment=None, price=a["price"], **where
        )
    ],
    ("JobMarket", "AuctionCleared"): _auction(cleared=True),
    ("JobMarket", "AuctionFailed"): _auction(cleared=False),
    ("JobMarket", "SlotAssigned"): lambda _, a, where: [
        db.Slot(
            job_id=a["jobId"], slot=a["slot"], provider=a["provider"], price=a["price"], **where
        )
    ],
    ("JobMarket", "ProviderRemoved"): lambda _, a, where: [
        db.Slot(
            job_id=a["jobId"],
            slot=a["slot"],
            provider=a["provider"],
            price=None,
            removed_reason=_reason(a["reason"]),
            **where,
        )
    ],
    ("JobMarket", "SlotReleased"): lambda _, a, where: [
        db.Slot(
            job_id=a["jobId"],
            slot=a["slot"],
            provider=a["provider"],
            price=None,
            removed_reason="Released",
            **where,
        )
    ],
    ("JobMarket", "CheckpointCommitted"): _unit,
    ("JobMarket", "UnitRejected"): lambda _, a, where: [
        db.Rollback(
            job_id=a["jobId"],
            slot=a["slot"],
            index=a["index"],
            clawed_back=a["clawedBack"],
            **where,
        )
    ],
    ("JobMarket", "JobCompleted"): _status(JobStatus.COMPLETED),
    ("JobMarket", "JobSettled"): _settled,
    ("JobMarket", "JobCancelled"): _cancelled,
    ("Verification", "ResultPosted"): _result(
        "result", "verifier", lambda a: a["pass"], "evidenceCid"
    ),
    ("Verification", "DisputeOpened"): _result("dispute", "challenger"),
    ("Verification", "DisputeResolved"): _result(
        "resolved", "resolver", lambda a: not a["confirmed"], "evidenceCid"
    ),
    ("Verification", "DisputeExpired"): _result("expired"),
    ("Staking", "ProviderRegistered"): lambda _, a, where: [
        db.Provider(
            address=a["provider"],
            tier=a["tier"],
            gpu_model=a["gpuModel"],
            gpus=a["gpus"],
            endpoint=a["endpoint"],
            **where,
        )
    ],
    ("Staking", "Staked"): _stake("staked"),
    ("Staking", "UnstakeRequested"): _stake("unstake"),
    ("Staking", "Withdrawn"): _stake("withdrawn"),
    ("Staking", "CollateralLocked"): _stake("locked", "provider"),
    ("Staking", "CollateralUnlocked"): _stake("unlocked", "provider"),
    ("Staking", "Slashed"): _slashed,
    ("ZenToken", "Transfer"): _transfer,
    ("Registry", "VersionPublished"): _version_published,
    ("Registry", "NameTransferred"): lambda _, a, where: [
        db.RegistryTransfer(kind=Kind(a["kind"]).label, name=a["name"], new_owner=a["to"], **where)
    ],
}

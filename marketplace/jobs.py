"""A user's training job on the ledger: submit with escrow, follow it, settle, fetch the weights."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from eth_account.signers.local import LocalAccount

from marketplace.chain.errors import ChainError, ContractRevert, TransactionReverted
from marketplace.chain.ledger import JobRequest, Ledger
from marketplace.chain.permit import sign_permit
from marketplace.chain.zen import rounded
from marketplace.errors import ZooError
from marketplace.protocol.spec import JobSpec, parse_spec
from marketplace.protocol.terms import JobStatus
from marketplace.protocol.units import units_per_node
from marketplace.results import LastUnit, unit_loss, write_result
from marketplace.storage import Storage

log = logging.getLogger(__name__)

REPLICAS = 3
CLOSE_GRACE = 3  # seconds after a round's reveal deadline before the user closes it


class JobError(ZooError):
    """A job could not be submitted, run or settled as asked."""


class BudgetBelowReserve(JobError, ValueError):
    """The budget cannot pay every node for one checkpoint interval at the maximum price."""


class InsufficientZen(JobError, ValueError):
    """The wallet holds less ZEN than the budget to escrow."""


class NoBids(JobError):
    """No auction round filled before the deadline; the job was cancelled and refunded."""


@dataclass(frozen=True)
class Order:
    """What the user asks the market for."""

    max_budget: int  # ZEN wei escrowed
    max_price: int  # ZEN wei per GPU-hour
    tier: int = 0
    nodes: int | None = None  # default: the spec's distributed.nodes
    sample_rate_bps: int = 1_000
    checkpoint_interval: int = 600  # seconds a node may go without a checkpoint

    def reserve(self, nodes: int) -> int:
        """The least budget worth escrowing: every node paid for one checkpoint interval at the
        maximum price, so no winner can run out of budget before its first checkpoint."""
        return math.ceil(self.max_price * nodes * self.checkpoint_interval / 3600)


@dataclass(frozen=True)
class Progress:
    status: JobStatus
    units_done: int
    units_total: int
    accrued: int  # ZEN wei, fee included
    loss: float | None  # training loss at the latest checkpoint


@dataclass(frozen=True)
class Settlement:
    payment: int
    fee: int
    refund: int
    verifier_pool: int
    tx: str
    block: int


def job_request(spec_text: str, spec_cid: str, order: Order) -> JobRequest:
    """The ledger's job request for a spec and an order, refused if the budget is below the reserve."""
    spec = parse_spec(spec_text)
    nodes = order.nodes or spec.distributed.nodes
    reserve = order.reserve(nodes)
    if order.max_budget < reserve:
        raise BudgetBelowReserve(
            f"budget {rounded(order.max_budget)} ZEN is below the reserve {rounded(reserve)} ZEN "
            f"({nodes} node(s) x {order.checkpoint_interval}s at {rounded(order.max_price)} ZEN/GPU-hour)")
    return JobRequest(
        spec_cid=spec_cid, tier=order.tier, nodes=nodes, units_per_node=units_per_node(spec),
        checkpoint_interval=order.checkpoint_interval, sample_rate_bps=order.sample_rate_bps,
        max_price=order.max_price, budget=order.max_budget,
    )


def check_funds(ledger: Ledger, address: str, budget: int) -> None:
    held = ledger.balance(address)
    if held < budget:
        raise InsufficientZen(f"wallet {address} holds {rounded(held)} ZEN, the budget needs {rounded(budget)}")


def pin(storage: Storage, data: bytes) -> str:
    """Add `data` and pin it on as many of the known nodes as a checkpoint would be; its CID."""
    cid = storage.add_bytes(data)
    storage.pin(cid, replicas=min(REPLICAS, len(storage.nodes)))
    return cid


def submit(ledger: Ledger, user: LocalAccount, storage: Storage, spec_text: str, order: Order) -> int:
    """Validate the spec, pin it, and escrow the budget with a permit; returns the job id."""
    request = job_request(spec_text, "", order)  # a bad spec or budget is refused before pinning
    check_funds(ledger, user.address, order.max_budget)
    request = replace(request, spec_cid=pin(storage, spec_text.encode()))
    deadline, v, r, s = sign_permit(ledger, user, ledger.market.address, order.max_budget)
    receipt = ledger.send(ledger.create_job_call(request, (deadline, v, r, s)), user)
    (job_id,) = ledger.created_jobs(receipt)
    log.info("job %d created: spec %s, budget %d", job_id, request.spec_cid, order.max_budget)
    return job_id


def wait_for_auction(ledger: Ledger, user: LocalAccount, job_id: int, timeout: float, poll: float = 1.0) -> None:
    """Wait until providers hold the job's slots; past `timeout`, cancel for a full refund.

    A round that ends with too few bids is closed here too, which opens the next round: providers
    close the rounds they bid in, but nobody else would close an empty one.
    """
    deadline = time.monotonic() + timeout
    while ledger.job_status(job_id) == JobStatus.OPEN:
        job = ledger.job(job_id)
        if time.monotonic() > deadline:
            ledger.send(ledger.cancel_job_call(job_id), user)
            raise NoBids(f"no bids filled job {job_id} within {timeout:.0f}s: cancelled, "
                         f"{rounded(job['budget'])} ZEN refunded to {user.address}")
        # The bidders close their own round first; the user steps in only after a grace period.
        if ledger.w3.eth.get_block("latest")["timestamp"] > job["revealDeadline"] + CLOSE_GRACE:
            try:
                ledger.close_auction(user, job_id)
            except ChainError as exc:  # closed by someone else meanwhile
                log.info("close auction: %s", exc)
        time.sleep(poll)


def progress(ledger: Ledger, storage: Storage, job_id: int, losses: dict[str, float | None]) -> Progress:
    """Where the job is, from chain state and its latest checkpoint's own metrics (`losses` caches
    them by CID, so each checkpoint is fetched once)."""
    job = ledger.job(job_id)
    slots = [ledger.slot(job_id, i) for i in range(job["nodes"])]
    slot_budget = job["budget"] // job["nodes"]
    units = latest_units(ledger, job_id)
    loss = None
    if units:
        cid = units[0]["cid"]
        if cid not in losses:
            losses[cid] = unit_loss(storage.cat(cid))
        loss = losses[cid]
    return Progress(
        status=JobStatus(job["status"]),
        units_done=sum(s["unitsDone"] for s in slots),
        units_total=job["unitsPerNode"] * job["nodes"],
        accrued=sum(slot_budget - s["remaining"] for s in slots),
        loss=loss,
    )


def latest_units(ledger: Ledger, job_id: int) -> list[dict]:
    """The live last unit of each slot (a rollback voids later ones), as event arguments."""
    job = ledger.job(job_id)
    events = ledger.checkpoint_events(job_id)
    latest = []
    for slot in range(job["nodes"]):
        done = ledger.slot(job_id, slot)["unitsDone"]
        live = [e["args"] for e in events if e["args"]["slot"] == slot and e["args"]["index"] == done - 1]
        if live:
            latest.append(live[-1])
    return latest


def follow(ledger: Ledger, storage: Storage, job_id: int, on_progress: Callable[[Progress], None],
           poll: float = 1.0) -> Progress:
    """Report progress until the job has nothing left to run."""
    last = None
    losses: dict[str, float | None] = {}
    while True:
        now = progress(ledger, storage, job_id, losses)
        if now != last:
            on_progress(now)
            last = now
        if now.status in (JobStatus.COMPLETED, JobStatus.SETTLED, JobStatus.CANCELLED):
            return now
        time.sleep(poll)


def settle(ledger: Ledger, user: LocalAccount, job_id: int, poll: float = 1.0) -> Settlement:
    """Settle once the verification window is over (or find a provider's settlement)."""
    window = ledger.verification_window()
    while ledger.job_status(job_id) == JobStatus.COMPLETED:
        job = ledger.job(job_id)
        now = ledger.w3.eth.get_block("latest")["timestamp"]
        open_disputes = ledger.open_disputes(job_id)
        if now >= job["completedAt"] + window and open_disputes == 0:
            try:
                ledger.send(ledger.settle_call(job_id), user)
            except (ContractRevert, TransactionReverted) as exc:  # e.g. a provider settled first, or in the same block
                log.info("settle: %s", exc)
        time.sleep(poll)
    event = ledger.settlement_event(job_id)
    args = event["args"]
    return Settlement(args["payment"], args["fee"], args["refund"], args["verifierPool"],
                      "0x" + event["transactionHash"].hex().removeprefix("0x"), event["blockNumber"])


def fetch_weights(ledger: Ledger, storage: Storage, job_id: int, output: Path) -> tuple[str, str]:
    """Write the trained model's weights to `output`, from the units on the chain; see `write_result`."""
    job = ledger.job(job_id)
    units = [LastUnit(u["slot"], u["index"], u["cid"], bytes(u["stateHash"]).hex())
             for u in latest_units(ledger, job_id)]
    return write_result(storage, job_id, units, job["nodes"], job["unitsPerNode"], output)


def read_spec_text(path: Path) -> str:
    """The spec file's text, pinned as is."""
    try:
        return path.read_text()
    except OSError as exc:
        raise JobError(f"cannot read job spec {path}: {exc.strerror}") from None


def load_spec_text(path: Path) -> tuple[str, JobSpec]:
    """The spec file's text and its validated form."""
    text = read_spec_text(path)
    return text, parse_spec(text)

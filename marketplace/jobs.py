"""A user's training job on the ledger: submit with escrow, take it through its journey with the
user's own wallet (the chain transport of marketplace/protocol/journey.py), fetch the weights."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import yaml
from eth_account.signers.local import LocalAccount

from marketplace.chain.errors import ChainError, ContractRevert, TransactionReverted
from marketplace.chain.ledger import JobRequest, Ledger
from marketplace.chain.permit import sign_permit
from marketplace.chain.registry import Registry
from marketplace.chain.zen import rounded
from marketplace.protocol.journey import (
    JobError,
    NoBids,
    Progress,
    Result,
    Settlement,
    Snapshot,
    Step,
    default_output,
    next_step,
    waiting_for,
)
from marketplace.protocol.spec import HFSpec, JobSpec, parse_spec
from marketplace.protocol.terms import DEFAULT_UNIT_GPU_SECONDS, JobStatus, Kind
from marketplace.protocol.units import units_per_node
from marketplace.results import LastUnit, unit_loss, write_result
from marketplace.storage import Storage

log = logging.getLogger(__name__)

REPLICAS = 3


class BudgetBelowReserve(JobError, ValueError):
    """The budget cannot pay every node for one unit at the maximum price."""


class UnitWorthless(JobError, ValueError):
    """An order whose units are worth no reference GPU-second: no unit could pay anything."""


class InsufficientZen(JobError, ValueError):
    """The wallet holds less ZEN than the budget to escrow."""


@dataclass(frozen=True)
class Order:
    """What the user asks the market for."""

    max_budget: int  # ZEN wei escrowed
    max_price: int  # ZEN wei per GPU-hour
    tier: int = 0
    nodes: int | None = None  # default: the spec's distributed.nodes
    sample_rate_bps: int = 1_000
    checkpoint_interval: int = 600  # seconds a node may go without a checkpoint
    # what one unit is worth, in reference GPU-seconds of the tier: a unit pays the clearing price
    # times this / 3600 whatever hardware runs it, so bidders price their own speed against it
    unit_gpu_seconds: int = DEFAULT_UNIT_GPU_SECONDS

    def reserve(self, nodes: int) -> int:
        """The least budget worth escrowing: every node paid for one unit at the maximum price,
        so no winner can run out of budget before its first checkpoint."""
        return math.ceil(self.max_price * nodes * self.unit_gpu_seconds / 3600)

    def full_cost(self, nodes: int, units: int) -> int:
        """What the whole job costs at the maximum price: every unit of every node."""
        return math.ceil(self.max_price * nodes * units * self.unit_gpu_seconds / 3600)


def job_request(spec_text: str, spec_cid: str, order: Order) -> JobRequest:
    """The ledger's job request for a spec and an order, refused if the budget is below the
    reserve."""
    spec = parse_spec(spec_text)
    nodes = order.nodes or spec.distributed.nodes
    if order.unit_gpu_seconds <= 0:
        raise UnitWorthless("a unit must be worth at least one reference GPU-second")
    reserve = order.reserve(nodes)
    if order.max_budget < reserve:
        raise BudgetBelowReserve(
            f"budget {rounded(order.max_budget)} ZEN is below the reserve {rounded(reserve)} ZEN "
            f"({nodes} node(s) x one unit of {order.unit_gpu_seconds} GPU-seconds "
            f"at {rounded(order.max_price)} ZEN/GPU-hour)"
        )
    return JobRequest(
        spec_cid=spec_cid,
        tier=order.tier,
        nodes=nodes,
        units_per_node=units_per_node(spec),
        checkpoint_interval=order.checkpoint_interval,
        sample_rate_bps=order.sample_rate_bps,
        max_price=order.max_price,
        budget=order.max_budget,
        unit_gpu_seconds=order.unit_gpu_seconds,
    )


def check_funds(ledger: Ledger, address: str, budget: int) -> None:
    held = ledger.balance(address)
    if held < budget:
        raise InsufficientZen(
            f"wallet {address} holds {rounded(held)} ZEN, the budget needs {rounded(budget)}"
        )


def pin(storage: Storage, data: bytes) -> str:
    """Add `data` and pin it on as many of the known nodes as a checkpoint would be; its CID."""
    cid = storage.add_bytes(data)
    storage.pin(cid, replicas=min(REPLICAS, len(storage.nodes)))
    return cid


def resolve_base(ledger: Ledger, spec_text: str) -> str:
    """The spec with the registered version it fine-tunes pinned to its folder's CID (`from:
    org/name@N` becomes that name and CID), so that every provider and verifier loads the same
    bytes; the spec as it is otherwise."""
    spec = parse_spec(spec_text)
    base = spec.model.base if isinstance(spec.model, HFSpec) else None
    if base is None or base.cid is not None:
        return spec_text
    version = Registry(ledger.w3, ledger.deployment).resolve(Kind.MODEL, base.name)
    return pin_base(spec_text, base.name, version.cid)


def pin_base(spec_text: str, name: str, cid: str) -> str:
    """The spec with `model.from` the version `name` and its folder's CID."""
    document = yaml.safe_load(spec_text)
    document["model"]["from"] = {"name": name, "cid": cid}
    return yaml.safe_dump(document, sort_keys=False)


def submit(
    ledger: Ledger, user: LocalAccount, storage: Storage, spec_text: str, order: Order
) -> int:
    """Validate the spec (a version it fine-tunes resolved from the registry), pin it, and escrow
    the budget with a permit; returns the job id."""
    request = job_request(spec_text, "", order)  # a bad spec or budget is refused before pinning
    spec_text = resolve_base(ledger, spec_text)
    check_funds(ledger, user.address, order.max_budget)
    request = replace(request, spec_cid=pin(storage, spec_text.encode()))
    deadline, v, r, s = sign_permit(ledger, user, ledger.market.address, order.max_budget)
    receipt = ledger.send(ledger.create_job_call(request, (deadline, v, r, s)), user)
    (job_id,) = ledger.created_jobs(receipt)
    log.info("job %d created: spec %s, budget %d", job_id, request.spec_cid, order.max_budget)
    return job_id


class ChainJob:
    """A job on the ledger, looked at and acted on with the user's own wallet: the journey's chain
    transport, with the same calls as the SDK's Job (the journey through a gateway).

    `storage` is read for the latest checkpoint's loss and for the weights; a journey that
    neither reports progress nor fetches the result goes without.
    """

    def __init__(
        self,
        ledger: Ledger,
        user: LocalAccount,
        job_id: int,
        storage: Storage | None = None,
        poll: float = 1.0,
    ):
        self.ledger = ledger
        self.user = user
        self.id = job_id
        self.storage = storage
        self.poll = poll
        self._losses: dict[str, float | None] = {}  # by checkpoint CID: each is fetched once

    def __repr__(self) -> str:
        return f"ChainJob({self.id})"

    def wait(
        self,
        on_progress: Callable[[Progress], None] | None = None,
        *,
        until: JobStatus = JobStatus.SETTLED,
        auction_timeout: float | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        """Take the job to `until` (see `next_step`): close auction rounds nobody closed, cancel for
        a full refund past `auction_timeout` seconds (NoBids), expire disputes nobody answered in
        time, settle once verification is over. `on_progress` gets the progress whenever it
        changes, `on_wait` what the journey waits for (see `waiting_for`) whenever that does."""
        started, last, said = time.monotonic(), None, None
        while True:
            if on_progress is not None and (now := self.progress()) != last:
                on_progress(now)
                last = now
            job, waited = self.snapshot(), time.monotonic() - started
            step = next_step(job, until=until, waited=waited, auction_timeout=auction_timeout)
            if on_wait is not None and (saying := waiting_for(job)) != said:
                on_wait(saying)
                said = saying
            if step is Step.ARRIVED:
                return
            if step is Step.CANCEL:
                self.cancel()
                raise NoBids(self.id, waited, job.budget, self.user.address)
            if step is Step.CLOSE_AUCTION:
                self._close_auction()
            elif step is Step.EXPIRE_DISPUTES:
                self._expire_disputes(job.now)
            elif step is Step.SETTLE:
                self._try_settle()
            time.sleep(self.poll)

    def snapshot(self) -> Snapshot:
        job = self.ledger.job(self.id)
        status = JobStatus(job["status"])
        completed = status is JobStatus.COMPLETED
        now = self.ledger.w3.eth.get_block("latest")["timestamp"]
        disputes = self.ledger.pending_disputes(self.id) if completed else []
        return Snapshot(
            job_id=self.id,
            status=status,
            budget=job["budget"],
            now=now,
            reveal_deadline=job["revealDeadline"],
            window_ends=job["completedAt"] + self._verification_window if completed else None,
            open_disputes=len(disputes) if completed else None,
            expirable_disputes=sum(now > d.ends_at for d in disputes) if completed else None,
            disputes_end=max((d.ends_at for d in disputes), default=None),
        )

    @cached_property
    def _verification_window(self) -> int:
        return self.ledger.verification_window()

    def progress(self) -> Progress:
        """Where the job is, from chain state and its latest checkpoint's own metrics."""
        job = self.ledger.job(self.id)
        slots = [self.ledger.slot(self.id, i) for i in range(job["nodes"])]
        slot_budget = job["budget"] // job["nodes"]
        return Progress(
            status=JobStatus(job["status"]),
            units_done=sum(s["unitsDone"] for s in slots),
            units_total=job["unitsPerNode"] * job["nodes"],
            accrued=sum(slot_budget - s["remaining"] for s in slots),
            loss=self._latest_loss(),
        )

    def _latest_loss(self) -> float | None:
        if self.storage is None:
            return None
        units = latest_units(self.ledger, self.id)
        if not units:
            return None
        cid = units[0]["cid"]
        if cid not in self._losses:
            self._losses[cid] = unit_loss(self.storage.cat(cid))
        return self._losses[cid]

    def _close_auction(self) -> None:
        try:
            self.ledger.close_auction(self.user, self.id)
        except ChainError as exc:  # closed by someone else meanwhile
            log.info("close auction: %s", exc)

    def cancel(self) -> None:
        """Cancel while no auction has cleared: the whole budget comes back."""
        self.ledger.send(self.ledger.cancel_job_call(self.id), self.user)

    def _expire_disputes(self, now: int | None) -> None:
        """Close the disputes whose windows ended unanswered: they count as passed, and settlement
        waits on them. Someone expiring one first is no failure."""
        for dispute in self.ledger.pending_disputes(self.id):
            if now is not None and now > dispute.ends_at:
                try:
                    self.ledger.send(dispute.expire, self.user)
                    log.info("expired the %s", dispute.what)
                except (ContractRevert, TransactionReverted) as exc:
                    log.info("expire %s: %s", dispute.what, exc)

    def _try_settle(self) -> None:
        """Settle if the ledger lets us; someone else settling first, even in the same block, is no
        failure: the next look finds the job settled."""
        try:
            self.ledger.send(self.ledger.settle_call(self.id), self.user)
        except (ContractRevert, TransactionReverted) as exc:
            log.info("settle: %s", exc)

    def clearing_price(self) -> int:
        """ZEN wei per GPU-hour the auction cleared at."""
        return self.ledger.slot(self.id, 0)["price"]

    def settlement(self) -> Settlement:
        event = self.ledger.settlement_event(self.id)
        if event is None:
            raise JobError(f"job {self.id} is not settled")
        args = event["args"]
        return Settlement(
            args["payment"],
            args["fee"],
            args["refund"],
            args["verifierPool"],
            "0x" + event["transactionHash"].hex().removeprefix("0x"),
            event["blockNumber"],
        )

    def result(self, output: str | Path | None = None) -> Result:
        """The trained model written to `output` (default weights/job-<id>.pt; for a Hugging
        Face model, the folder weights/job-<id>); see `fetch_weights`."""
        if self.storage is None:
            raise JobError(f"job {self.id}: fetching the weights needs IPFS storage")
        path = Path(output) if output is not None else default_output(self.id)
        cid, digest, written = fetch_weights(self.ledger, self.storage, self.id, path)
        return Result(self.id, cid, "0x" + digest, written)


def latest_units(ledger: Ledger, job_id: int) -> list[dict]:
    """The live last unit of each slot (a rollback voids later ones), as event arguments."""
    job = ledger.job(job_id)
    events = ledger.checkpoint_events(job_id)
    latest = []
    for slot in range(job["nodes"]):
        done = ledger.slot(job_id, slot)["unitsDone"]
        live = [
            e["args"]
            for e in events
            if e["args"]["slot"] == slot and e["args"]["index"] == done - 1
        ]
        if live:
            latest.append(live[-1])
    return latest


def fetch_weights(
    ledger: Ledger, storage: Storage, job_id: int, output: Path
) -> tuple[str, str, Path]:
    """Write the trained model to `output`, from the units on the chain; see `write_result`."""
    job = ledger.job(job_id)
    units = [
        LastUnit(u["slot"], u["index"], u["cid"], bytes(u["stateHash"]).hex())
        for u in latest_units(ledger, job_id)
    ]
    return write_result(
        storage, job_id, units, job["nodes"], job["unitsPerNode"], output, job["specCid"]
    )


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

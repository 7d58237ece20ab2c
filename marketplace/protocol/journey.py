"""A user's job from escrow to settlement, decided once for every way of reaching the ledger.

The chain path (marketplace/jobs.py, the user's wallet sending to the ledger) and the gateway path
(the SDK) each look at the job, hand what they saw to `next_step`, and do what it says: close an
auction round nobody closed, cancel an auction that took too long, settle once verification is
over. They differ only in how they look and act; the words they report in are defined here too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from marketplace.chain.zen import rounded
from marketplace.errors import ZooError
from marketplace.protocol.terms import JobStatus

CLOSE_GRACE = 3  # seconds after a round's reveal deadline before the user closes it
GOALS = (JobStatus.RUNNING, JobStatus.COMPLETED, JobStatus.SETTLED)  # where a journey may stop


class JobError(ZooError):
    """A job could not be submitted, run or settled as asked."""


class NoBids(JobError):
    """No auction round filled before the deadline; the job was cancelled and refunded."""

    def __init__(self, job_id: int, waited: float, refund: int, user: str):
        super().__init__(
            f"no bids filled job {job_id} within {int(waited)}s: cancelled, "
            f"{rounded(refund)} ZEN refunded to {user}"
        )


class JobCancelled(JobError):
    """The job ended cancelled, with nothing trained."""

    def __init__(self, job_id: int):
        super().__init__(f"job {job_id} was cancelled")


class Step(Enum):
    """What the journey does next."""

    WAIT = "wait"  # for bids, training, verification or the index to catch up
    CLOSE_AUCTION = "close auction"  # a round is past its reveal window and nobody closed it
    CANCEL = "cancel"  # the auction took longer than the user waits: take the whole budget back
    EXPIRE_DISPUTES = "expire disputes"  # verification is over, disputes nobody answered in time
    SETTLE = "settle"  # verification is over: pay the providers, refund the rest
    ARRIVED = "arrived"  # the job is where the journey was asked to take it


@dataclass(frozen=True)
class Snapshot:
    """What the journey needs to know of a job at one look. A transport leaves None what it cannot
    tell: a gateway's index shows neither the chain's clock, nor a round's deadline, nor
    disputes."""

    job_id: int
    status: JobStatus  # NONE while the job is not visible yet (a gateway's index behind the chain)
    budget: int = 0  # ZEN wei escrowed: what a cancel refunds
    now: int | None = None  # the chain's clock: its latest block's timestamp
    reveal_deadline: int | None = None  # the open auction round's
    window_ends: int | None = None  # when a completed job's verification window is over
    open_disputes: int | None = None  # disputes of a completed job still to be resolved
    expirable_disputes: int | None = None  # of those, the ones past their window: anyone may end
    disputes_end: int | None = None  # when the last open dispute's window ends


@dataclass(frozen=True)
class Progress:
    """How far the training is, as both paths report it."""

    status: JobStatus
    units_done: int
    units_total: int
    accrued: int  # ZEN wei, fee included
    loss: float | None  # training loss at the latest checkpoint


@dataclass(frozen=True)
class Settlement:
    """Where the budget went when the job settled."""

    payment: int  # ZEN wei for accepted work, fee included
    fee: int  # to the treasury
    refund: int  # budget - payment, back to the user
    verifier_pool: int  # part of the fee owed to verifiers
    tx: str
    block: int


@dataclass(frozen=True)
class Result:
    """The trained weights, written where the user asked."""

    job_id: int
    cid: str  # the final checkpoint
    state_hash: str  # 0x hex: the final checkpoint's, as committed on-chain; a group model's own
    path: Path  # where the weights were written


def default_output(job_id: int) -> Path:
    """Where a job's weights are written unless the user says otherwise."""
    return Path("weights") / f"job-{job_id}.pt"


def next_step(
    job: Snapshot,
    *,
    until: JobStatus = JobStatus.SETTLED,
    waited: float = 0.0,
    auction_timeout: float | None = None,
) -> Step:
    """The next step of a journey that takes the job to `until` (its auction cleared: RUNNING; its
    training done: COMPLETED; or SETTLED), `waited` seconds after it began.

    With `auction_timeout`, a job still in its auction after that many seconds is cancelled for a
    full refund. A job found cancelled ends the journey with JobCancelled.
    """
    if until not in GOALS:
        raise ValueError(
            f"a journey ends at {', '.join(g.label for g in GOALS)}, not {until.label}"
        )
    if job.status is JobStatus.CANCELLED:
        raise JobCancelled(job.job_id)
    if job.status is JobStatus.NONE:
        return Step.WAIT
    if job.status >= until:
        return Step.ARRIVED
    if job.status is JobStatus.OPEN:
        if auction_timeout is not None and waited > auction_timeout:
            return Step.CANCEL
        if round_unclosed(job):
            return Step.CLOSE_AUCTION
    if job.status is JobStatus.COMPLETED and verification_over(job):
        return Step.EXPIRE_DISPUTES if job.expirable_disputes else Step.SETTLE
    return Step.WAIT


def waiting_for(job: Snapshot) -> str:
    """What a journey that waits is waiting for, in words a user can act on; times are the
    chain's."""
    if job.status is JobStatus.NONE:
        return "waiting for the job to appear in the gateway's index"
    if job.status is JobStatus.OPEN:
        if job.reveal_deadline is not None:
            return f"auction: bids are revealed until {_when(job.reveal_deadline)}"
        return "auction: waiting for providers to bid"
    if job.status is JobStatus.RUNNING:
        return "training"
    if job.status is JobStatus.COMPLETED:
        if job.window_ends is not None and (job.now is None or job.now < job.window_ends):
            return f"verification: sampled units may be re-run until {_when(job.window_ends)}"
        if job.open_disputes:
            ends = ""
            if job.disputes_end is not None:
                ends = f"; the last one's window ends {_when(job.disputes_end)}"
            return (
                f"{job.open_disputes} dispute(s) open: settlement waits until a second verifier "
                f"answers each or its window ends{ends}"
            )
        return "settling"
    return job.status.label


def _when(timestamp: int) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(timestamp))


def round_unclosed(job: Snapshot) -> bool:
    """The round's reveal window ended a grace period ago and it is still open. The bidders close
    their own round first; nobody but the user would close one that drew too few bids, and closing
    it opens the next round."""
    if job.now is None or job.reveal_deadline is None:
        return False  # a transport that cannot tell leaves the round to the bidders
    return job.now > job.reveal_deadline + CLOSE_GRACE


def verification_over(job: Snapshot) -> bool:
    """The completed job's verification window is over and every dispute closed or past its
    window. A transport that cannot tell tries anyway: the ledger refuses a settle that comes too
    early, and the try is repeated."""
    if job.open_disputes and not job.expirable_disputes:
        return False
    return job.window_ends is None or job.now is None or job.now >= job.window_ends

"""A job's journey decides each step at the right moment, from what the chain shows or from the less
a gateway's index shows."""

from __future__ import annotations

import pytest

from marketplace.chain.zen import ZEN
from marketplace.protocol.journey import (
    CLOSE_GRACE,
    JobCancelled,
    NoBids,
    Snapshot,
    Step,
    next_step,
    waiting_for,
)
from marketplace.protocol.terms import JobStatus

REVEAL_DEADLINE = 1_000
WINDOW_ENDS = 5_000


def on_chain(
    status: JobStatus, now: int, *, open_disputes: int = 0, expirable: int = 0
) -> Snapshot:
    """The job as the chain path sees it at chain time `now`."""
    completed = status is JobStatus.COMPLETED
    return Snapshot(
        7,
        status,
        budget=500 * ZEN,
        now=now,
        reveal_deadline=REVEAL_DEADLINE,
        window_ends=WINDOW_ENDS if completed else None,
        open_disputes=open_disputes if completed else None,
        expirable_disputes=expirable if completed else None,
        disputes_end=WINDOW_ENDS + 600 if open_disputes else None,
    )


def through_a_gateway(status: JobStatus) -> Snapshot:
    """The job as a gateway's index shows it: no clock, deadlines or disputes."""
    return Snapshot(7, status, budget=500 * ZEN)


def test_an_open_round_is_left_to_its_bidders_until_the_grace_is_over():
    assert next_step(on_chain(JobStatus.OPEN, REVEAL_DEADLINE - 10)) is Step.WAIT
    assert next_step(on_chain(JobStatus.OPEN, REVEAL_DEADLINE + CLOSE_GRACE)) is Step.WAIT
    assert (
        next_step(on_chain(JobStatus.OPEN, REVEAL_DEADLINE + CLOSE_GRACE + 1)) is Step.CLOSE_AUCTION
    )


def test_a_gateway_that_shows_no_deadline_never_closes_a_round():
    assert next_step(through_a_gateway(JobStatus.OPEN), waited=10**6) is Step.WAIT


@pytest.mark.parametrize(
    "job", [on_chain(JobStatus.OPEN, REVEAL_DEADLINE + 100), through_a_gateway(JobStatus.OPEN)]
)
def test_an_auction_past_its_timeout_is_cancelled_before_another_round(job):
    assert next_step(job, waited=120.5, auction_timeout=120) is Step.CANCEL
    assert next_step(job, waited=119.5, auction_timeout=120) is not Step.CANCEL
    assert next_step(job, waited=10**6) is not Step.CANCEL  # no timeout: the user waits for bids


def test_a_running_job_waits_and_the_auction_leg_has_arrived():
    running = on_chain(JobStatus.RUNNING, REVEAL_DEADLINE + 100)
    assert (
        next_step(running, waited=10**6, auction_timeout=1) is Step.WAIT
    )  # the timeout is the auction's
    assert next_step(running, until=JobStatus.RUNNING) is Step.ARRIVED
    assert next_step(running, until=JobStatus.COMPLETED) is Step.WAIT


def test_a_completed_job_settles_once_its_window_is_over():
    assert next_step(on_chain(JobStatus.COMPLETED, WINDOW_ENDS - 1)) is Step.WAIT
    assert next_step(on_chain(JobStatus.COMPLETED, WINDOW_ENDS)) is Step.SETTLE
    assert (
        next_step(on_chain(JobStatus.COMPLETED, WINDOW_ENDS), until=JobStatus.COMPLETED)
        is Step.ARRIVED
    )


def test_an_open_dispute_holds_the_settlement():
    assert next_step(on_chain(JobStatus.COMPLETED, WINDOW_ENDS + 100, open_disputes=1)) is Step.WAIT


def test_a_dispute_nobody_answered_in_time_is_expired_so_the_job_settles():
    late = on_chain(JobStatus.COMPLETED, WINDOW_ENDS + 700, open_disputes=2, expirable=1)
    assert next_step(late) is Step.EXPIRE_DISPUTES
    # inside the verification window nothing is expired, even a dispute past its own window
    early = on_chain(JobStatus.COMPLETED, WINDOW_ENDS - 1, open_disputes=1, expirable=1)
    assert next_step(early) is Step.WAIT


def test_a_waiting_journey_says_what_it_waits_for():
    assert waiting_for(on_chain(JobStatus.OPEN, 0)).startswith("auction: bids are revealed until")
    assert waiting_for(on_chain(JobStatus.COMPLETED, WINDOW_ENDS - 1)).startswith(
        "verification: sampled units may be re-run until"
    )
    disputed = waiting_for(on_chain(JobStatus.COMPLETED, WINDOW_ENDS + 1, open_disputes=2))
    assert disputed.startswith("2 dispute(s) open: settlement waits until a second verifier")
    assert disputed.endswith("the last one's window ends 01:33:20 UTC")  # WINDOW_ENDS + 600
    assert waiting_for(through_a_gateway(JobStatus.NONE)).startswith("waiting for the job")


def test_a_gateway_that_shows_no_window_tries_to_settle():
    assert next_step(through_a_gateway(JobStatus.COMPLETED)) is Step.SETTLE


@pytest.mark.parametrize("until", [JobStatus.RUNNING, JobStatus.COMPLETED, JobStatus.SETTLED])
def test_a_settled_job_has_arrived_wherever_the_journey_was_going(until):
    assert next_step(on_chain(JobStatus.SETTLED, WINDOW_ENDS + 100), until=until) is Step.ARRIVED


@pytest.mark.parametrize("until", [JobStatus.RUNNING, JobStatus.COMPLETED, JobStatus.SETTLED])
def test_a_cancelled_job_ends_the_journey(until):
    with pytest.raises(JobCancelled, match="^job 7 was cancelled$"):
        next_step(through_a_gateway(JobStatus.CANCELLED), until=until)


def test_a_job_not_indexed_yet_is_waited_for():
    assert next_step(Snapshot(7, JobStatus.NONE), waited=10**6, auction_timeout=1) is Step.WAIT


@pytest.mark.parametrize("until", [JobStatus.OPEN, JobStatus.CANCELLED, JobStatus.NONE])
def test_a_journey_ends_only_where_a_job_can_rest(until):
    with pytest.raises(ValueError, match="a journey ends at running, completed, settled"):
        next_step(on_chain(JobStatus.OPEN, 0), until=until)


def test_no_bids_says_what_came_back_and_to_whom():
    assert str(NoBids(7, 15.4, 500 * ZEN, "0xUser")) == (
        "no bids filled job 7 within 15s: cancelled, 500.000000 ZEN refunded to 0xUser"
    )

"""A re-run that kills its worker every time it runs (out of memory, say) is dead-lettered after a
few deliveries instead of coming back forever, and one that runs past its time limit ends with no
verdict: neither is grounds to fail the unit, and neither stops the workers."""

from __future__ import annotations

import json

import pytest
import redis
from celery.exceptions import SoftTimeLimitExceeded

from verifier import tasks
from verifier.celery_app import RERUN_SECONDS, app
from verifier.recompute import UnitInputs

UNIT = UnitInputs(
    job_id=1,
    slot=0,
    index=2,
    provider="0x" + "11" * 20,
    spec_cid="QmSpec",
    cid="QmUnit",
    state_hash="ab" * 32,
)
INPUTS = UNIT.to_json()


@pytest.fixture
def queue(celery) -> redis.Redis:
    """The test Redis the app's tasks come through, emptied."""
    client = celery.backend.client
    client.flushdb()
    return client


def test_a_task_whose_worker_keeps_dying_is_dead_lettered(queue, monkeypatch):
    def never(*_):
        raise AssertionError("a dead-lettered task must not run again")

    monkeypatch.setattr(tasks, "recompute", never)
    for _ in range(tasks.MAX_DELIVERIES):  # the deliveries whose worker died mid-run
        queue.incr("zoo:verifier:delivered:poison:0")

    result = tasks.verify_unit.apply(args=[INPUTS], task_id="poison").get()

    assert result["pass"] is None and result["evidence_cid"] is None
    assert result["reason"].startswith("dead-lettered")
    [entry] = [json.loads(e) for e in queue.lrange(tasks.DEAD_LETTER, 0, -1)]
    assert entry["task_id"] == "poison" and UnitInputs.from_json(entry["inputs"]) == UNIT


def test_a_retry_is_a_new_attempt_not_a_redelivery(queue):
    for attempt in range(tasks.FETCH_RETRIES + 1):
        assert tasks._delivered(queue, "t", attempt) == 1
    assert tasks._delivered(queue, "t", 0) == 2  # attempt 0 handed back by a dead worker


def test_a_re_run_past_its_time_limit_ends_without_a_verdict(queue, monkeypatch):
    def too_long(*_):
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(tasks, "recompute", too_long)
    result = tasks.verify_unit.apply(args=[INPUTS], task_id="slow").get()
    assert result["pass"] is None and "took longer than" in result["reason"]
    assert queue.llen(tasks.DEAD_LETTER) == 0


def test_every_re_run_has_a_time_limit():
    assert app.conf.task_soft_time_limit == RERUN_SECONDS
    assert app.conf.task_time_limit > RERUN_SECONDS

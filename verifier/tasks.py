"""The verification task a worker runs: re-run one unit, pin the evidence, return the verdict."""

from __future__ import annotations

import json
import logging
import time

import redis
from celery.exceptions import SoftTimeLimitExceeded

from marketplace.config import Settings
from marketplace.storage import ReplicationError, Storage
from verifier.celery_app import app
from verifier.errors import InputsUnavailable, Withheld
from verifier.recompute import UnitInputs, Verdict, recompute, runner_from_env

log = logging.getLogger(__name__)

EVIDENCE_REPLICAS = 3  # like checkpoints: kept on up to three nodes
# Fetch attempts before a unit is left unjudged: a missing input is never grounds to fail it, unless
# it is a checkpoint the unit's provider committed, unserved until the unit's `withheld_after`.
FETCH_RETRIES = 5
RETRY_DELAY_S = 2
MAX_RETRY_DELAY_S = 60
# Deliveries of one attempt of a task: more means its worker died running it each time (acks_late
# hands it back), and it goes to the dead-letter list instead of killing the next worker.
MAX_DELIVERIES = 3
DEAD_LETTER = "zoo:verifier:dead-letter"  # a Redis list, newest first, kept to DEAD_LETTER_KEEP
DEAD_LETTER_KEEP = 1_000


@app.task(bind=True, name="verifier.verify_unit", max_retries=None)  # see `_retry_in`
def verify_unit(self, inputs: dict) -> dict:
    """Verify the unit `inputs` (a UnitInputs as JSON) describes.

    Returns {"pass": True | False | None, "evidence_cid", "reason", "recomputed_state_hash"};
    "pass" None means no verdict (and no evidence), so the daemon posts nothing.
    """
    unit = UnitInputs.from_json(inputs)
    settings = Settings()
    broker = self.backend.client  # the Redis the tasks come through
    deliveries = _delivered(broker, self.request.id, self.request.retries)
    if deliveries > MAX_DELIVERIES:
        reason = f"dead-lettered: its worker died each of {deliveries - 1} times it ran"
        _dead_letter(broker, self.request.id, inputs, reason)
        log.error("job %d slot %d unit %d %s", unit.job_id, unit.slot, unit.index, reason)
        return _no_verdict(reason)
    with Storage(settings.ipfs_api, settings.ipfs_replicas) as storage:
        try:
            verdict = recompute(unit, storage, runner_from_env())
        except SoftTimeLimitExceeded:
            reason = f"the re-run took longer than {self.soft_time_limit or 'its limit'} s"
            log.warning("job %d slot %d unit %d: %s", unit.job_id, unit.slot, unit.index, reason)
            return _no_verdict(reason)
        except InputsUnavailable as exc:
            withheld = isinstance(exc, Withheld) and unit.withheld_after is not None
            delay = _retry_in(self.request.retries, unit.withheld_after if withheld else None)
            if delay is not None:
                log.warning(
                    "job %d slot %d unit %d: %s; retrying", unit.job_id, unit.slot, unit.index, exc
                )
                raise self.retry(countdown=delay) from exc
            if not withheld:
                return _no_verdict(str(exc))
            verdict = Verdict(False, f"withheld: {exc}")
        evidence_cid = None
        if verdict.passed is not None:
            evidence_cid = pin_evidence(
                storage, json.dumps(verdict.evidence(unit), sort_keys=True).encode()
            )
    log.info(
        "job %d slot %d unit %d: %s (%s)",
        unit.job_id,
        unit.slot,
        unit.index,
        {True: "pass", False: "FAIL", None: "no verdict"}[verdict.passed],
        verdict.reason,
    )
    return {
        "pass": verdict.passed,
        "evidence_cid": evidence_cid,
        "reason": verdict.reason,
        "recomputed_state_hash": verdict.recomputed_state_hash,
    }


def _retry_in(retries: int, withheld_after: float | None) -> float | None:
    """Seconds until the next fetch attempt, backing off; None when there is none left. A missing
    input gets FETCH_RETRIES more attempts; a withheld checkpoint (`withheld_after` set) is looked
    for until `withheld_after` and at least twice, and then judged."""
    delay = min(RETRY_DELAY_S * 2**retries, MAX_RETRY_DELAY_S)
    if withheld_after is None:
        return delay if retries < FETCH_RETRIES else None
    left = withheld_after - time.time()
    if left > 0:
        return min(delay, left)
    return RETRY_DELAY_S if retries == 0 else None


def _no_verdict(reason: str) -> dict:
    return {"pass": None, "evidence_cid": None, "reason": reason, "recomputed_state_hash": None}


def _delivered(client: redis.Redis, task_id: str, attempt: int) -> int:
    """Count this delivery of the task's `attempt`; how many there have been. A retry is a new
    attempt; the same attempt delivered again means the worker that ran it died."""
    key = f"zoo:verifier:delivered:{task_id}:{attempt}"
    count = int(client.incr(key))
    client.expire(key, 7 * 24 * 3600)
    return count


def _dead_letter(client: redis.Redis, task_id: str, inputs: dict, reason: str) -> None:
    entry = {"task_id": task_id, "inputs": inputs, "reason": reason, "at": time.time()}
    client.lpush(DEAD_LETTER, json.dumps(entry))
    client.ltrim(DEAD_LETTER, 0, DEAD_LETTER_KEEP - 1)


def pin_evidence(storage: Storage, document: bytes) -> str:
    """Add the evidence and pin it on as many nodes as are known, up to EVIDENCE_REPLICAS.

    The primary node already holds it after the add, so too few replicas is logged, not fatal:
    the verdict must still reach the chain before its window closes.
    """
    cid = storage.add_bytes(document)
    try:
        storage.pin(cid, replicas=min(EVIDENCE_REPLICAS, len(storage.nodes)))
    except ReplicationError as exc:
        log.warning("evidence %s: %s", cid, exc)
    return cid

"""The verification task a worker runs: re-run one unit, pin the evidence, return the verdict."""

from __future__ import annotations

import json
import logging

from marketplace.config import Settings
from marketplace.storage import ReplicationError, Storage
from verifier.celery_app import app
from verifier.errors import InputsUnavailable
from verifier.recompute import UnitInputs, recompute

log = logging.getLogger(__name__)

EVIDENCE_REPLICAS = 3  # like checkpoints: kept on up to three nodes
FETCH_RETRIES = 5  # then the unit is left unjudged: a missing input is never grounds to fail it
RETRY_DELAY_S = 2


@app.task(bind=True, name="verifier.verify_unit", max_retries=FETCH_RETRIES)
def verify_unit(self, inputs: dict) -> dict:
    """Verify the unit `inputs` (a UnitInputs as JSON) describes.

    Returns {"pass": True | False | None, "evidence_cid", "reason", "recomputed_state_hash"};
    "pass" None means no verdict (and no evidence), so the daemon posts nothing.
    """
    unit = UnitInputs.from_json(inputs)
    settings = Settings()
    with Storage(settings.ipfs_api, settings.ipfs_replicas) as storage:
        try:
            verdict = recompute(unit, storage)
        except InputsUnavailable as exc:
            if self.request.retries < self.max_retries:
                log.warning(
                    "job %d slot %d unit %d: %s; retrying", unit.job_id, unit.slot, unit.index, exc
                )
                raise self.retry(countdown=RETRY_DELAY_S) from exc
            return {
                "pass": None,
                "evidence_cid": None,
                "reason": str(exc),
                "recomputed_state_hash": None,
            }
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

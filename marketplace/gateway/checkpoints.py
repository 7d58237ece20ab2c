"""What a checkpoint says about itself (state hash, training metrics), read from IPFS once per
CID."""

from __future__ import annotations

import logging
import math
import threading
import time

from sqlalchemy.orm import Session

from marketplace.gateway import db
from marketplace.storage import (
    CidMismatch,
    ContentNotFound,
    NodeUnavailable,
    Storage,
    StorageError,
)

log = logging.getLogger(__name__)

# The most the gateway reads of one checkpoint to learn its facts: a provider commits whatever CID
# it likes, and a metrics request must not make the gateway read gigabytes.
MAX_CHECKPOINT_BYTES = 512 * 1024 * 1024
# Failures that say nothing of the content: no node serves it (a valid copy) now, later one may.
UNSERVED = (ContentNotFound, NodeUnavailable, CidMismatch)
# How long a checkpoint whose read failed is passed over. An unserved one may be served later; one
# that is no checkpoint, or too large, stays so under its CID (tried again only after a restart
# or a day, in case this gateway's bounds were the reason).
RETRY_UNSERVED_S = 60.0
RETRY_UNREADABLE_S = 24 * 3600.0


class PassedOver:
    """Checkpoints whose last read failed, each until it may be tried again: without this, the
    same few unreadable checkpoints (junk a provider committed, each up to the size bound) would
    be fetched again by every metrics request, and take its reads from the readable ones. One per
    server process; past `size` the oldest are forgotten first."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def __contains__(self, cid: str) -> bool:
        until = self._until.get(cid)
        return until is not None and time.monotonic() < until

    def add(self, cid: str, seconds: float) -> None:
        with self._lock:
            self._until.pop(cid, None)
            self._until[cid] = time.monotonic() + seconds
            while len(self._until) > self.size:
                del self._until[next(iter(self._until))]


def shown_metrics(metrics: object) -> dict[str, int | float]:
    """The figures a checkpoint's metadata claims, as far as they are finite numbers under short
    names; anything else shows as none."""
    if not isinstance(metrics, dict):
        return {}
    return {
        k: v
        for k, v in list(metrics.items())[:64]
        if isinstance(k, str)
        and len(k) <= 64
        and isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
    }


def checkpoint_facts(
    session: Session, storage: Storage, cid: str, passed_over: PassedOver
) -> db.CheckpointFacts | None:
    """The checkpoint's facts, cached; None while it cannot be read (tried again once
    `passed_over` lets it be)."""
    facts = session.get(db.CheckpointFacts, cid)
    if facts is not None or cid in passed_over:
        return facts
    # Reading a checkpoint needs torch: loaded here, on the first uncached CID, not with the
    # gateway.
    from marketplace.protocol.checkpoint import Checkpoint, CheckpointError

    try:
        checkpoint = Checkpoint.load(storage.cat(cid, max_bytes=MAX_CHECKPOINT_BYTES))
    except UNSERVED as exc:
        log.info("checkpoint %s not served: %s", cid, exc)
        passed_over.add(cid, RETRY_UNSERVED_S)
        return None
    except (StorageError, CheckpointError) as exc:
        log.info("checkpoint %s not readable: %s", cid, exc)
        passed_over.add(cid, RETRY_UNREADABLE_S)
        return None
    facts = db.CheckpointFacts(
        cid=cid,
        state_hash="0x" + checkpoint.state_hash(),
        metrics=shown_metrics(checkpoint.metadata.get("metrics")),
    )
    session.merge(facts)
    session.commit()
    return facts

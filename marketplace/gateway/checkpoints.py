"""What a checkpoint says about itself (state hash, training metrics), read from IPFS once per
CID."""

from __future__ import annotations

import logging
import math

from sqlalchemy.orm import Session

from marketplace.gateway import db
from marketplace.storage import Storage, StorageError

log = logging.getLogger(__name__)

# The most the gateway reads of one checkpoint to learn its facts: a provider commits whatever CID
# it likes, and a metrics request must not make the gateway read gigabytes.
MAX_CHECKPOINT_BYTES = 512 * 1024 * 1024


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


def checkpoint_facts(session: Session, storage: Storage, cid: str) -> db.CheckpointFacts | None:
    """The checkpoint's facts, cached; None while no IPFS node serves it (asked again next time)."""
    facts = session.get(db.CheckpointFacts, cid)
    if facts is not None:
        return facts
    # Reading a checkpoint needs torch: loaded here, on the first uncached CID, not with the
    # gateway.
    from marketplace.protocol.checkpoint import Checkpoint, CheckpointError

    try:
        checkpoint = Checkpoint.load(storage.cat(cid, max_bytes=MAX_CHECKPOINT_BYTES))
    except (StorageError, CheckpointError) as exc:
        log.info("checkpoint %s not readable: %s", cid, exc)
        return None
    facts = db.CheckpointFacts(
        cid=cid,
        state_hash="0x" + checkpoint.state_hash(),
        metrics=shown_metrics(checkpoint.metadata.get("metrics")),
    )
    session.merge(facts)
    session.commit()
    return facts

"""What a checkpoint says about itself (state hash, training metrics), read from IPFS once per
CID."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from marketplace.gateway import db
from marketplace.storage import Storage, StorageError

log = logging.getLogger(__name__)


def checkpoint_facts(session: Session, storage: Storage, cid: str) -> db.CheckpointFacts | None:
    """The checkpoint's facts, cached; None while no IPFS node serves it (asked again next time)."""
    facts = session.get(db.CheckpointFacts, cid)
    if facts is not None:
        return facts
    # Reading a checkpoint needs torch: loaded here, on the first uncached CID, not with the
    # gateway.
    from marketplace.protocol.checkpoint import Checkpoint, CheckpointError

    try:
        checkpoint = Checkpoint.load(storage.cat(cid))
    except (StorageError, CheckpointError) as exc:
        log.info("checkpoint %s not readable: %s", cid, exc)
        return None
    facts = db.CheckpointFacts(
        cid=cid,
        state_hash="0x" + checkpoint.state_hash(),
        metrics=checkpoint.metadata.get("metrics", {}),
    )
    session.merge(facts)
    session.commit()
    return facts

"""Off-chain writes of content: job specs (validated) and datasets, pinned to IPFS for a signed-in
wallet."""

from __future__ import annotations

import tempfile
import time

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import update

from marketplace.gateway import db
from marketplace.gateway.api.deps import SessionDep, SignedInDep, StorageDep
from marketplace.gateway.api.schemas import (
    REFUSED,
    SIGNED_IN,
    DatasetUploaded,
    SpecUpload,
    SpecUploaded,
)
from marketplace.gateway.api.service import TooLarge
from marketplace.jobs import REPLICAS, pin
from marketplace.protocol.spec import parse_spec
from marketplace.protocol.units import units_per_node

router = APIRouter(prefix="/uploads", tags=["uploads"])

MAX_DATASET_BYTES = 256 * 1024 * 1024


@router.post("/spec", response_model=SpecUploaded, responses=REFUSED | SIGNED_IN)
def upload_spec(body: SpecUpload, storage: StorageDep, _: SignedInDep):
    """Validate a job spec (a bad one is refused naming its field) and pin its text as is."""
    spec = parse_spec(body.spec)
    return {
        "cid": pin(storage, body.spec.encode()),
        "name": spec.name,
        "nodes": spec.distributed.nodes,
        "units_per_node": units_per_node(spec),
    }


@router.post(
    "/dataset",
    max_body_size=MAX_DATASET_BYTES,
    response_model=DatasetUploaded,
    responses=REFUSED | SIGNED_IN,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def upload_dataset(
    request: Request, storage: StorageDep, session: SessionDep, address: SignedInDep
):
    """Pin a dataset's bytes (the request body) and name them by CID, for a spec's `data` to point
    to. The body streams to a temporary file, bounded by the upload size and what is left of the
    wallet's daily quota, then to IPFS."""
    settings = request.app.state.settings
    today = int(time.time()) // 86_400
    spent = session.get(db.UploadSpend, (address, today))
    left = settings.gateway_upload_quota - (spent.bytes if spent else 0)
    bound = min(MAX_DATASET_BYTES, left)
    with tempfile.NamedTemporaryFile(prefix="zoo-upload-") as staged:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > bound:
                raise TooLarge(
                    f"a dataset upload holds at most {MAX_DATASET_BYTES} bytes, and this wallet "
                    f"has {max(left, 0)} bytes of its daily upload quota left"
                )
            staged.write(chunk)
        staged.flush()
        cid = await run_in_threadpool(storage.add_file, staged.name)
    await run_in_threadpool(storage.pin, cid, replicas=min(REPLICAS, len(storage.nodes)))
    if spent is None:
        session.add(db.UploadSpend(address=address, day=today, bytes=size))
    else:  # in SQL, so two uploads finishing together both count
        session.execute(
            update(db.UploadSpend)
            .where(db.UploadSpend.address == address, db.UploadSpend.day == today)
            .values(bytes=db.UploadSpend.bytes + size)
        )
    session.commit()
    return {"cid": cid, "size": size}

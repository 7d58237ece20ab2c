"""Off-chain writes of content: job specs (validated) and datasets, pinned to IPFS for a signed-in
wallet."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from marketplace.gateway.api.deps import SignedInDep, StorageDep
from marketplace.gateway.api.schemas import (
    REFUSED,
    SIGNED_IN,
    DatasetUploaded,
    SpecUpload,
    SpecUploaded,
)
from marketplace.gateway.api.service import TooLarge
from marketplace.jobs import pin
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
async def upload_dataset(request: Request, storage: StorageDep, _: SignedInDep):
    """Pin a dataset's bytes (the request body) and name them by CID, for a spec's `data` to point
    to."""
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_DATASET_BYTES:
            raise TooLarge(f"a dataset upload holds at most {MAX_DATASET_BYTES} bytes")
    return {"cid": await run_in_threadpool(pin, storage, bytes(data)), "size": len(data)}

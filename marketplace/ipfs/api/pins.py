"""RPC routes for pins and garbage collection: pin/add, pin/rm, pin/ls, repo/gc."""

import json
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from marketplace.ipfs.api.deps import CidsDep, RepoDep
from marketplace.ipfs.cid import CID
from marketplace.ipfs.errors import Unsupported
from marketplace.ipfs.pinstore import NotPinned

router = APIRouter(tags=["pins"])

_PIN_TYPES = ("all", "direct", "indirect", "recursive")


@router.post("/pin/add")
def pin_add(repo: RepoDep, cids: CidsDep, recursive: bool = True) -> dict:
    for cid in cids:
        repo.pin(cid, recursive)
    return {"Pins": [str(cid) for cid in cids]}


@router.post("/pin/rm")
def pin_rm(repo: RepoDep, cids: CidsDep, recursive: bool = True) -> dict:
    for cid in cids:
        repo.pins.remove(cid, recursive)
    return {"Pins": [str(cid) for cid in cids]}


@router.post("/pin/ls")
def pin_ls(
    repo: RepoDep,
    arg: Annotated[list[str] | None, Query()] = None,
    type: Annotated[str, Query(description="all, direct, indirect or recursive")] = "all",
) -> dict:
    if type not in _PIN_TYPES:
        raise Unsupported(f"invalid pin type {type!r}, use one of {', '.join(_PIN_TYPES)}")
    with_indirect = type in ("all", "indirect")
    pinned = {cid.multihash: (cid, kind) for cid, kind in repo.pinned(with_indirect).items()}
    if arg:
        wanted = [CID.parse(text) for text in arg]
        missing = [cid for cid in wanted if cid.multihash not in pinned]
        if missing:
            raise NotPinned(f"path '{missing[0]}' is not pinned")
        selected = [(cid, pinned[cid.multihash][1]) for cid in wanted]
    else:
        selected = list(pinned.values())
    return {
        "Keys": {
            str(cid): {"Type": kind} for cid, kind in selected if type == "all" or kind == type
        }
    }


@router.post("/repo/gc")
def repo_gc(repo: RepoDep) -> Response:
    """One JSON line per removed block, as Kubo streams them."""
    removed = repo.gc()
    body = "".join(json.dumps({"Key": {"/": str(cid)}}) + "\n" for cid in removed)
    return Response(body, media_type="application/json", headers={"X-Chunked-Output": "1"})

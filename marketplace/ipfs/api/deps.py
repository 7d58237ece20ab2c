"""Shared request dependencies: the node's repository, CID arguments and bounded bodies."""

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Query, Request

from marketplace.ipfs.cid import CID
from marketplace.ipfs.errors import AddTooLarge, InvalidCid
from marketplace.ipfs.repo import Repo


def get_repo(request: Request) -> Repo:
    return request.app.state.repo


def get_cids(
    arg: Annotated[list[str] | None, Query(description="CIDs or /ipfs/ paths")] = None,
) -> list[CID]:
    """Kubo passes positional arguments as repeated `arg` query parameters."""
    if not arg:
        raise InvalidCid('argument "cid" is required')
    return [CID.parse(text) for text in arg]


def get_cid(cids: Annotated[list[CID], Depends(get_cids)]) -> CID:
    if len(cids) != 1:
        raise InvalidCid(f"expected one CID argument, got {len(cids)}")
    return cids[0]


def get_body(request: Request, repo: Annotated[Repo, Depends(get_repo)]) -> AsyncIterator[bytes]:
    """The request body, bounded by the quota on one add: refused before it is read when its
    Content-Length is over, and as soon as a chunked one passes the bound."""
    limit = repo.quotas.max_add_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    return _bounded(request.stream(), limit)


async def _bounded(stream: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    received = 0
    async for piece in stream:
        received += len(piece)
        if received > limit:
            raise _too_large(limit)
        yield piece


def _too_large(limit: int) -> AddTooLarge:
    return AddTooLarge(f"request body is over this node's limit of {limit} bytes per add")


RepoDep = Annotated[Repo, Depends(get_repo)]
BodyDep = Annotated[AsyncIterator[bytes], Depends(get_body)]
CidsDep = Annotated[list[CID], Depends(get_cids)]
CidDep = Annotated[CID, Depends(get_cid)]

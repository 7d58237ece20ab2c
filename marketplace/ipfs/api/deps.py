"""Shared request dependencies: the node's repository and CID arguments."""

from typing import Annotated

from fastapi import Depends, Query, Request

from marketplace.ipfs.cid import CID
from marketplace.ipfs.errors import InvalidCid
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


RepoDep = Annotated[Repo, Depends(get_repo)]
CidsDep = Annotated[list[CID], Depends(get_cids)]
CidDep = Annotated[CID, Depends(get_cid)]

"""What routes depend on: a database session, an address, a page, the ledger, IPFS, a signed-in
wallet."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from web3 import Web3

from marketplace.chain.ledger import Ledger
from marketplace.gateway.auth import NotSignedIn, signed_in_address
from marketplace.storage import Storage


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as session:
        yield session


class Page:
    """limit/offset pagination, bounded so one request cannot ask for the whole table."""

    def __init__(
        self,
        limit: Annotated[int, Query(ge=1, le=200, description="Rows per page.")] = 50,
        offset: Annotated[int, Query(ge=0, le=2**62, description="Rows to skip.")] = 0,
    ):
        self.limit = limit
        self.offset = offset


ADDRESS = r"^0x[0-9a-fA-F]{40}$"


def checksummed(address: str | None) -> str | None:
    """Rows store checksummed addresses, so a lower-case query must be converted to match."""
    return None if address is None else Web3.to_checksum_address(address)


def address_path(
    address: Annotated[str, Path(pattern=ADDRESS, description="An 0x address.")],
) -> str:
    return Web3.to_checksum_address(address)


SessionDep = Annotated[Session, Depends(get_session)]
PageDep = Annotated[Page, Depends()]
AddressDep = Annotated[str, Depends(address_path)]
JobId = Annotated[int, Path(ge=0, le=2**63 - 1, description="The job's on-chain id.")]


def get_ledger(request: Request) -> Ledger:
    """The ledger at ZOO_RPC_URL, opened on first use: the read routes work without a chain."""
    return request.app.state.ledger.ledger()


def get_storage(request: Request) -> Iterator[Storage]:
    settings = request.app.state.settings
    with Storage(settings.ipfs_api, settings.ipfs_replicas) as storage:
        yield storage


def signed_in(
    session: SessionDep,
    credentials: Annotated[
        HTTPAuthorizationCredentials | None, Depends(HTTPBearer(auto_error=False))
    ],
) -> str:
    """The wallet address of the bearer token's Sign-In with Ethereum session."""
    if credentials is None:
        raise NotSignedIn(
            "sign in first: POST /auth/session, then send 'Authorization: Bearer <token>'"
        )
    return signed_in_address(session, credentials.credentials)


LedgerDep = Annotated[Ledger, Depends(get_ledger)]
StorageDep = Annotated[Storage, Depends(get_storage)]
SignedInDep = Annotated[str, Depends(signed_in)]

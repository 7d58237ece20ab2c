"""The treasury: balance, income by source and grants, from the indexed ZEN transfers."""

from __future__ import annotations

from fastapi import APIRouter, Request

from marketplace.chain.errors import ChainError
from marketplace.gateway.api import service
from marketplace.gateway.api.deps import PageDep, SessionDep
from marketplace.gateway.api.schemas import TreasuryPublic, TreasuryTransferPublic

router = APIRouter(prefix="/treasury", tags=["treasury"])


@router.get("", response_model=TreasuryPublic)
def treasury(session: SessionDep, request: Request):
    """Fees, slash shares and other income in; grants out. Sources are told apart by the manifest's
    addresses."""
    chain_id = service.indexed_chain_id(session)
    try:
        deployment = None if chain_id is None else request.app.state.settings.deployment(chain_id)
    except ChainError:  # no manifest here for the indexed chain: totals only
        deployment = None
    return service.treasury(session, deployment)


@router.get("/transfers", response_model=list[TreasuryTransferPublic])
def transfers(session: SessionDep, page: PageDep):
    """Every ZEN transfer in or out of the treasury, newest first."""
    return service.treasury_transfers(session, page.limit, page.offset)

"""Settlements: what each finished job paid, charged, refunded."""

from __future__ import annotations

from fastapi import APIRouter

from marketplace.gateway.api import service
from marketplace.gateway.api.deps import PageDep, SessionDep
from marketplace.gateway.api.schemas import SettlementPublic

router = APIRouter(prefix="/settlements", tags=["settlements"])


@router.get("", response_model=list[SettlementPublic])
def list_settlements(session: SessionDep, page: PageDep):
    """Newest first; cancellations appear as a settlement with no payment and the whole budget
    refunded."""
    return service.list_settlements(session, page.limit, page.offset)

"""Network totals and the treasury's balance."""

from __future__ import annotations

from fastapi import APIRouter

from marketplace.gateway.api import service
from marketplace.gateway.api.deps import SessionDep
from marketplace.gateway.api.schemas import NetworkStats

router = APIRouter(prefix="/stats", tags=["stats"])


@router.get("", response_model=NetworkStats)
def network_stats(session: SessionDep):
    """Totals over every indexed event, to the wei."""
    return service.network_stats(session)

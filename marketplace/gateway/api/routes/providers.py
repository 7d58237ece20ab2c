"""Providers: who sells compute, in which tier, with what stake, and what they lost to slashes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from marketplace.gateway.api import service
from marketplace.gateway.api.deps import AddressDep, PageDep, SessionDep
from marketplace.gateway.api.schemas import NOT_FOUND, ProviderDetail, ProviderPublic

router = APIRouter(prefix="/providers", tags=["providers"])


@router.get("", response_model=list[ProviderPublic])
def list_providers(
    session: SessionDep,
    page: PageDep,
    tier: Annotated[
        int | None, Query(ge=0, le=255, description="Only providers in this tier.")
    ] = None,
):
    """In order of registration."""
    return service.list_providers(session, page.limit, page.offset, tier)


@router.get("/{address}", response_model=ProviderDetail, responses=NOT_FOUND)
def show_provider(session: SessionDep, address: AddressDep):
    """The provider with its stake, the jobs it held slots in and its slashes."""
    return service.get_provider(session, address)

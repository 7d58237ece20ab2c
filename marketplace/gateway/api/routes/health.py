"""Liveness, and how far the indexer has read."""

from __future__ import annotations

from fastapi import APIRouter

from marketplace.gateway.api import service
from marketplace.gateway.api.deps import SessionDep
from marketplace.gateway.api.schemas import Health

router = APIRouter(prefix="/health", tags=["health"])


@router.get("", response_model=Health)
def health(session: SessionDep):
    return {"status": "ok", "indexed_block": service.indexed_block(session)}

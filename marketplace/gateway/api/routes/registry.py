"""The model and dataset registry, as indexed: names, owners, versions and their lineage."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path

from marketplace.chain.registry import MAX_NAME_LENGTH
from marketplace.gateway.api import service
from marketplace.gateway.api.deps import PageDep, SessionDep
from marketplace.gateway.api.schemas import NOT_FOUND, RegistryNameDetail, RegistryNamePublic

router = APIRouter(prefix="/registry", tags=["registry"])

KindPath = Annotated[Literal["models", "datasets"], Path(description="What the names hold.")]
# One path segment each, in the registry's charset: `org/name` is two segments of the URL.
SEGMENT = r"^[a-z0-9._-]+$"
OrgPath = Annotated[str, Path(pattern=SEGMENT, max_length=MAX_NAME_LENGTH)]
NamePath = Annotated[str, Path(pattern=SEGMENT, max_length=MAX_NAME_LENGTH)]


@router.get("/{kind}", response_model=list[RegistryNamePublic])
def list_names(session: SessionDep, page: PageDep, kind: KindPath):
    """Names in the order they were first published, each with its owner and newest version."""
    return service.list_registry(session, kind.removesuffix("s"), page.limit, page.offset)


@router.get("/{kind}/{org}/{name}", response_model=RegistryNameDetail, responses=NOT_FOUND)
def show_name(session: SessionDep, kind: KindPath, org: OrgPath, name: NamePath):
    """A name with every version, oldest first: CID, license, parent, the job that made it."""
    return service.get_registry_name(session, kind.removesuffix("s"), f"{org}/{name}")

"""Jobs: list with filters, one job with its auction and settlement, its work units."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from marketplace.gateway.api import service
from marketplace.gateway.api.deps import ADDRESS, JobId, PageDep, SessionDep, checksummed
from marketplace.gateway.api.schemas import NOT_FOUND, JobDetail, JobPublic, JobStatus, UnitPublic

router = APIRouter(prefix="/jobs", tags=["jobs"])


@router.get("", response_model=list[JobPublic])
def list_jobs(
    session: SessionDep,
    page: PageDep,
    status: Annotated[JobStatus | None, Query(description="Only jobs in this status.")] = None,
    user: Annotated[str | None, Query(pattern=ADDRESS, description="Only jobs this user created.")] = None,
    provider: Annotated[str | None, Query(pattern=ADDRESS, description="Only jobs with a slot held by this provider.")] = None,
):
    """Newest first."""
    return service.list_jobs(session, page.limit, page.offset, status, checksummed(user), checksummed(provider))


@router.get("/{job_id}", response_model=JobDetail, responses=NOT_FOUND)
def show_job(session: SessionDep, job_id: JobId):
    """The job, its bids, slots, clearing price and settlement."""
    return service.get_job(session, job_id)


@router.get("/{job_id}/units", response_model=list[UnitPublic], responses=NOT_FOUND)
def job_units(session: SessionDep, job_id: JobId):
    """Every committed unit (checkpoint CID, state hash, GPU-seconds, pay) with its verification results."""
    return service.job_units(session, job_id)

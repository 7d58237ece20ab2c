"""Jobs: list with filters, one job with its auction and settlement, its units, logs, metrics and
result."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from marketplace.gateway.api import service
from marketplace.gateway.api.deps import (
    ADDRESS,
    JobId,
    PageDep,
    SessionDep,
    SignedInDep,
    StorageDep,
    checksummed,
)
from marketplace.gateway.api.schemas import (
    NOT_FOUND,
    REFUSED,
    SIGNED_IN,
    JobDetail,
    JobMetrics,
    JobPublic,
    JobResultPublic,
    JobStatus,
    LogLine,
    LogPost,
    LogsPosted,
    UnitPublic,
)

router = APIRouter(prefix="/jobs", tags=["jobs"])


@router.get("", response_model=list[JobPublic])
def list_jobs(
    session: SessionDep,
    page: PageDep,
    status: Annotated[JobStatus | None, Query(description="Only jobs in this status.")] = None,
    user: Annotated[
        str | None, Query(pattern=ADDRESS, description="Only jobs this user created.")
    ] = None,
    provider: Annotated[
        str | None,
        Query(pattern=ADDRESS, description="Only jobs with a slot held by this provider."),
    ] = None,
):
    """Newest first."""
    return service.list_jobs(
        session, page.limit, page.offset, status, checksummed(user), checksummed(provider)
    )


@router.get("/{job_id}", response_model=JobDetail, responses=NOT_FOUND)
async def show_job(job_id: JobId, request: Request):
    """The job, its bids, slots, clearing price and settlement.

    The most read route (clients poll it): answered from the cache on the event loop while the index
    has not moved, and built in a worker thread only when it has.
    """
    cache = request.app.state.cache
    body = cache.fresh(("job", job_id)) or await run_in_threadpool(_job_json, request.app, job_id)
    return Response(body, media_type="application/json")


def _job_json(app, job_id: int) -> bytes:
    with app.state.sessions() as session:
        return app.state.cache.get(
            session,
            ("job", job_id),
            lambda: (
                JobDetail.model_validate(service.get_job(session, job_id))
                .model_dump_json()
                .encode()
            ),
        )


@router.get("/{job_id}/units", response_model=list[UnitPublic], responses=NOT_FOUND)
def job_units(session: SessionDep, job_id: JobId, page: PageDep):
    """The committed units (checkpoint CID, state hash, GPU-seconds, pay) with their verification
    results, a page at a time in commit order."""
    return service.job_units(session, job_id, page.limit, page.offset)


@router.get("/{job_id}/logs", response_model=list[LogLine], responses=NOT_FOUND)
def job_logs(
    session: SessionDep,
    job_id: JobId,
    since: Annotated[
        int,
        Query(
            ge=0, le=2**62, description="Only lines after this id: the last one seen, to follow."
        ),
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="Lines at most.")] = 200,
):
    """The job's log lines, oldest first, as its user and providers posted them: a provider daemon
    run with ZOO_GATEWAY_URL posts one for each unit it commits."""
    return service.job_logs(session, job_id, since, limit)


@router.post("/{job_id}/logs", response_model=LogsPosted, responses=NOT_FOUND | SIGNED_IN | REFUSED)
def post_job_logs(session: SessionDep, job_id: JobId, body: LogPost, author: SignedInDep):
    """Append lines to the job's log: for the job's user and its providers, signed in."""
    return service.post_logs(session, job_id, author, body.lines, int(time.time()))


@router.get("/{job_id}/metrics", response_model=JobMetrics, responses=NOT_FOUND)
def job_metrics(request: Request, session: SessionDep, storage: StorageDep, job_id: JobId):
    """Units done, pay accrued, and each unit's loss and steps from its checkpoint's metadata."""
    return service.job_metrics(session, storage, job_id, request.app.state.passed_over)


@router.get("/{job_id}/result", response_model=JobResultPublic, responses=NOT_FOUND)
def job_result(request: Request, session: SessionDep, storage: StorageDep, job_id: JobId):
    """The trained weights' checkpoint (the last of slot 0), its committed state hash, and whether
    it checks out."""
    return service.job_result(session, storage, job_id, request.app.state.passed_over)

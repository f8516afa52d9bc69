"""Async jobs: ``GET /v1/jobs/{id}``, ``DELETE /v1/jobs/{id}``, ``GET /v1/jobs/{id}/events``.

Jobs are created by ``POST /v1/generate`` and ``POST /v1/stylize`` sent with the header
``Prefer: respond-async`` (RFC 7240): the same body and validation as the synchronous
call, answered ``202 Accepted`` with the job and ``Location: /v1/jobs/{id}``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent

from service.errors import ServiceError
from service.jobs import Job, JobResult, JobStore, JobWork

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

#: Seconds between keep-alive comments on an idle event stream.
HEARTBEAT_S = 15.0


class JobNotFound(ServiceError):
    status_code, code = 404, "job_not_found"


def job_store(request: Request) -> JobStore:
    return request.app.state.jobs


def job_of(job_id: str, store: Annotated[JobStore, Depends(job_store)]) -> Job:
    job = store.get(job_id)
    if job is None:
        raise JobNotFound(f"no job {job_id[:64]!r} (unknown, or expired after job_ttl_s)")
    return job


JobDep = Annotated[Job, Depends(job_of)]


def wants_async(
    prefer: Annotated[
        str | None,
        Header(
            description="'respond-async' (RFC 7240): answer 202 with a job instead of "
            "waiting; follow it at /v1/jobs/{id}"
        ),
    ] = None,
) -> bool:
    """Whether the client sent ``Prefer: respond-async``."""
    parts = (prefer or "").lower().split(",")
    return any(part.strip().split(";")[0].strip() == "respond-async" for part in parts)


RespondAsync = Annotated[bool, Depends(wants_async)]


def start_job(
    request: Request, kind: str, *, parts: int, unit: str, parameters: dict, work: JobWork
) -> JSONResponse:
    """Create a job and answer 202 with it (``Location`` names it)."""
    job = job_store(request).create(kind, parts=parts, unit=unit, parameters=parameters, work=work)
    return JSONResponse(
        job.as_dict(),
        status_code=202,
        headers={"Location": f"/v1/jobs/{job.id}", "Preference-Applied": "respond-async"},
    )


@router.get(
    "/{job_id}",
    summary="A job's state, progress, timings, and its result once it succeeded",
    responses={404: {"description": "unknown or expired job"}},
)
async def get_job(job: JobDep) -> dict:
    return job.as_dict()


@router.delete(
    "/{job_id}",
    summary="Cancel a job (a running one stops at its next sampler step or pass)",
    responses={404: {"description": "unknown or expired job"}},
)
async def cancel_job(job: JobDep, store: Annotated[JobStore, Depends(job_store)]) -> dict:
    store.cancel(job)
    return job.as_dict(with_result=False)


@router.get(
    "/{job_id}/events",
    summary="Server-Sent Events: 'progress' at each step, then one 'done' with the job",
    response_class=EventSourceResponse,
    responses={404: {"description": "unknown or expired job"}},
)
async def job_events(job: JobDep) -> AsyncIterator[ServerSentEvent]:
    seen = -1
    while True:
        if job.finished:
            yield ServerSentEvent(event="done", data=job.as_dict(with_result=False))
            return
        if job.version != seen:
            seen = job.version
            yield ServerSentEvent(event="progress", data=job.as_dict(with_result=False))
        elif not await job.wait_change(seen, HEARTBEAT_S):
            yield ServerSentEvent(comment="keep-alive")


__all__ = ["JobResult", "RespondAsync", "router", "start_job"]

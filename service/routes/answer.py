"""How a validated request is answered: now, on this process's model, or as a job.

``POST /v1/generate``, ``/v1/stylize`` and ``/v1/images/generations`` validate their
request into a :class:`~service.jobs.work.Work`, then :func:`answer` decides how it runs:

* ``Prefer: respond-async`` (RFC 7240): a background job, answered ``202 Accepted`` with
  the job and ``Location: /v1/jobs/{id}``; it is in the store before the 202 is sent;
* an ``Idempotency-Key``, a ``webhook``, or a model this process does not load: an
  interactive job that the request waits for (a replay of the key waits for, or
  returns, the first request's job);
* otherwise the work runs here at once on the model's interactive batcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from service.auth import Caller
from service.catalog import Served
from service.config import Settings
from service.errors import (
    DeadlineExceeded,
    JobNotFound,
    NotReady,
    ServiceError,
    ValidationFailed,
    error_of_job,
)
from service.images import return_freed_memory
from service.jobs.records import BACKGROUND, INTERACTIVE, JobRecord, JobResult, new_job_id
from service.jobs.runner import JobRunner
from service.jobs.store import JobStore, Watch, done_topic
from service.jobs.video_work import StylizeVideoWork
from service.jobs.webhooks import WebhookPolicy, WebhookRefused, check_target, webhook_request
from service.jobs.work import StylizeWork, Work, off_loop_if_large
from service.routes.deps import remaining_seconds
from service.routes.disconnect import unless_disconnected

#: Seconds between re-reads of a job whose change notification may have been missed.
REREAD_S = 1.0


def fingerprint(*parts: bytes | str) -> str:
    """The request's identity for ``Idempotency-Key``: SHA-256 over its parts."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


async def check_webhook(
    url: str | None, events: Sequence[str] | None, settings: Settings
) -> dict[str, Any] | None:
    """The job's webhook field, or a 422 naming why the target is refused."""
    if url is None:
        if events:
            raise ValidationFailed("webhook_events: give a webhook URL too")
        return None
    if settings.webhook_secret is None:
        raise ValidationFailed(
            "webhook: webhooks are not configured on this server (webhook_secret)",
            code="webhook_not_allowed",
        )
    policy = WebhookPolicy(
        tuple(settings.webhook_allowed_hosts), settings.webhook_allow_private_addresses
    )
    try:
        await check_target(url, policy)
    except WebhookRefused as exc:
        raise ValidationFailed(f"webhook: {exc}", code="webhook_not_allowed") from None
    return webhook_request(url, events)


@dataclass(frozen=True)
class Submission:
    """How the client asked for its work to be answered."""

    respond_async: bool = False
    idempotency: tuple[str, str] | None = None  # (key, fingerprint)
    webhook: dict[str, Any] | None = None


# ---------------------------------------------------------------------- answering
async def answer(
    request: Request,
    work: Work,
    served: Served,
    submission: Submission,
    handed_off: Callable[[], None] = lambda: None,
) -> JobResult | Response:
    """Run ``work`` as the client asked (see the module docstring); ``handed_off()`` is
    called once the work is out of the request's hands: its job stored, or its run
    started (the request's :class:`~service.images.PreparationBudget` lease ends)."""
    settings: Settings = request.app.state.settings
    who: Caller = request.state.caller
    store: JobStore = request.app.state.store
    if submission.respond_async:
        timeout = settings.video_job_timeout_s if work.long else settings.job_timeout_s
        record = _record(work, who, BACKGROUND, time.time() + timeout, submission)
        job, _ = await _create(store, None, record, work, who, submission)
        handed_off()
        return JSONResponse(
            job.public(),
            status_code=202,
            headers={"Location": f"/v1/jobs/{job.id}", "Preference-Applied": "respond-async"},
        )
    timeout = remaining_seconds(request, settings)
    if submission.idempotency is None and submission.webhook is None and served.pool is not None:
        handed_off()
        return await unless_disconnected(
            request,
            work.run(
                served.pool, priority=INTERACTIVE, timeout_s=timeout, progress=None, owner=who.name
            ),
        )
    if not served.live:
        raise NotReady(
            f"no worker serves {served.name!r} now; send the request with "
            "'Prefer: respond-async' to queue it",
            code="model_not_loaded",
        )
    record = _record(work, who, INTERACTIVE, time.time() + timeout, submission)
    runner: JobRunner = request.app.state.runner
    with store.hub.watch(done_topic(record.id)) as finished:  # before the job exists
        job, created = await _create(store, runner, record, work, who, submission)
        handed_off()
        if created:
            waiting = _wait_for(store, job.id, job, finished, timeout)
            return await unless_disconnected(request, waiting)
    with store.hub.watch(done_topic(job.id)) as finished:  # a replay: the first request's job
        waiting = _wait_for(store, job.id, None, finished, timeout)
        return await unless_disconnected(request, waiting)


def _record(
    work: Work, who: Caller, priority: str, deadline_at: float, submission: Submission
) -> JobRecord:
    return JobRecord(
        id=new_job_id(),
        kind=work.kind,
        model=work.model,
        owner=who.name,
        priority=priority,
        parts=work.parts,
        unit=work.unit,
        parameters=work.parameters,
        deadline_at=deadline_at,
        webhook=submission.webhook,
    )


def _encode_and_trim(work: StylizeWork | StylizeVideoWork) -> bytes:
    """The work's payload; then the decode's and the encode's freed memory goes back."""
    payload = work.to_payload()
    return_freed_memory()
    return payload


async def _create(
    store: JobStore,
    runner: JobRunner | None,
    record: JobRecord,
    work: Work,
    who: Caller,
    submission: Submission,
) -> tuple[JobRecord, bool]:
    """Store the job; ``runner``: this process's, for a job a request here waits for (it
    runs the job at once when it has room: ``JobRunner.create``)."""
    if isinstance(work, StylizeWork | StylizeVideoWork):  # images to encode, a clip to copy
        payload = await run_in_threadpool(_encode_and_trim, work)
    else:
        payload = work.to_payload()
    if runner is not None:
        return await runner.create(
            record,
            payload,
            work,
            owner_max_jobs=who.max_jobs,
            idempotency=submission.idempotency,
        )
    return await store.create(
        record, payload, owner_max_jobs=who.max_jobs, idempotency=submission.idempotency
    )


async def _wait_for(
    store: JobStore,
    job_id: str,
    record: JobRecord | None,
    finished: Watch,
    timeout_s: float,
) -> JobResult:
    """Wait for an interactive job's result; past ``timeout_s`` or when the client left,
    the job is cancelled (its batch drops it at the next step).

    ``finished`` watches the job's done topic. ``record`` is the job as read after that
    watch was registered (the job this request just created), or ``None``: read it
    here. Woken by the job's finish, the request takes the result the watch was handed
    (the job ran in this process), or else reads it: one store read when the job
    succeeded (a result is written with the final state, in one write); the record is
    read only when there is no result (the job failed or was cancelled) or after
    ``REREAD_S`` without news (in case a notification was lost).
    """
    deadline = time.monotonic() + timeout_s
    done = False
    try:
        if record is None:
            record = await store.get(job_id)
        while True:
            if record is None:
                raise JobNotFound("the job was forgotten before it finished")
            if record.finished:
                done = True
                if record.state != "succeeded":
                    raise error_of_job(record.error)
                data = await store.result(job_id)
                if data is None:
                    raise JobNotFound("the job's result was forgotten")
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlineExceeded(f"no result within {timeout_s:g} s")
            if await finished.wait(min(left, REREAD_S)):
                data = finished.result or await store.result(job_id)
                if data is not None:
                    done = True
                    break
            record = await store.get(job_id)
        return await off_loop_if_large(len(data), JobResult.from_bytes, data)
    finally:
        if not done:
            with contextlib.suppress(ServiceError):
                await asyncio.shield(store.cancel(job_id))

"""Jobs over HTTP: how work is answered (now, or as a job), and the ``/v1/jobs`` routes.

``POST /v1/generate``, ``/v1/stylize`` and ``/v1/images/generations`` validate their
request into a :class:`~service.jobs.work.Work`, then :func:`answer` decides how it runs:

* ``Prefer: respond-async`` (RFC 7240): a background job, answered ``202 Accepted`` with
  the job and ``Location: /v1/jobs/{id}``; it is in the store before the 202 is sent;
* an ``Idempotency-Key``, a ``webhook``, or a model this process does not load: an
  interactive job that the request waits for (a replay of the key waits for, or
  returns, the first request's job);
* otherwise the work runs here at once on the model's interactive batcher.

The job routes answer only the key that made the job: any other key gets the same 404
as an unknown job (no existence leak). ``GET /v1/jobs`` lists the key's recent jobs and
``GET /v1/me`` says which key is in use. Event streams are fed by one reader per job per
replica (:class:`JobFeeds`), so a hundred streams of one job cost one store read per
change; they are bounded per key and per replica, and do not count against
``max_connections``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import time
from collections import OrderedDict, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from service.auth import Caller
from service.catalog import ModelCatalog, Served
from service.config import Settings
from service.errors import (
    Conflict,
    DeadlineExceeded,
    JobNotFound,
    NotReady,
    Overloaded,
    ServiceError,
    StoreUnavailable,
    ValidationFailed,
    error_of_job,
)
from service.jobs.records import BACKGROUND, INTERACTIVE, JobRecord, JobResult, new_job_id
from service.jobs.store import (
    IdempotencyKeyReused,
    IdempotentJobExpired,
    JobStore,
    Refused,
    StoreError,
    done_topic,
    job_topic,
)
from service.jobs.store import StoreUnavailable as StoreDown
from service.jobs.webhooks import WebhookPolicy, WebhookRefused, check_target, webhook_request
from service.jobs.work import StylizeWork, Work, off_loop_if_large
from service.routes import error_responses, remaining_seconds, unless_disconnected

router = APIRouter(prefix="/v1", tags=["jobs"])

#: How long ``DELETE`` waits for a running job to stop before it answers 202.
CANCEL_WAIT_S = 2.0
#: Seconds between re-reads of a job whose change notification may have been missed.
REREAD_S = 1.0


# ------------------------------------------------------------------ dependencies
async def job_store(request: Request) -> JobStore:
    return request.app.state.store


async def catalog(request: Request) -> ModelCatalog:
    return request.app.state.catalog


async def caller(request: Request) -> Caller:
    """The key the request came with (``service.app``'s middleware sets it)."""
    return request.state.caller


StoreDep = Annotated[JobStore, Depends(job_store)]
CatalogDep = Annotated[ModelCatalog, Depends(catalog)]
CallerDep = Annotated[Caller, Depends(caller)]


def service_error_of(exc: StoreError) -> ServiceError:
    """The API error a store error answers as (``service.app`` registers this)."""
    if isinstance(exc, Refused):
        return Overloaded(str(exc), retry_after_s=exc.retry_after_s)
    if isinstance(exc, IdempotencyKeyReused):
        return ValidationFailed(
            "Idempotency-Key: this key was used for a different request; use a new key",
            code="idempotency_key_reused",
        )
    if isinstance(exc, IdempotentJobExpired):
        return Conflict(
            "Idempotency-Key: the first request's job finished and was forgotten "
            "(job_ttl_s); its answer is no longer held",
            code="idempotent_result_gone",
        )
    return StoreUnavailable(f"the job store is unavailable, retry shortly ({exc})")


def wants_async(request: Request) -> bool:
    """Whether any ``Prefer`` header (repeated headers combine, RFC 7240) asks for
    ``respond-async``."""
    values = ",".join(request.headers.getlist("prefer")).lower().split(",")
    return any(value.strip().split(";")[0].strip() == "respond-async" for value in values)


async def _prefer_doc(
    request: Request,
    prefer: Annotated[
        str | None,
        Header(
            description="'respond-async' (RFC 7240): answer 202 with a job instead of "
            "waiting; follow it at /v1/jobs/{id}"
        ),
    ] = None,
) -> bool:
    """Documents the header; reads every ``Prefer`` header of the request."""
    return wants_async(request)


RespondAsync = Annotated[bool, Depends(_prefer_doc)]


async def idempotency_key(
    key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="Makes a retried POST safe: the same key and the same request "
            "within idempotency_ttl_s answer the first request's job or result; the same "
            "key with another request is a 422.",
        ),
    ] = None,
) -> str | None:
    if key is None:
        return None
    key = key.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]  # a structured-field string, as the IETF draft writes it
    if not 1 <= len(key) <= 255 or not key.isprintable() or not key.isascii():
        raise ValidationFailed("Idempotency-Key: 1 to 255 printable ASCII characters")
    return key


IdempotencyKey = Annotated[str | None, Depends(idempotency_key)]


async def rate_limited(request: Request, store: StoreDep, caller: CallerDep) -> None:
    """One request of the caller's key against its rate (``key_rate``)."""
    if caller.rate is None:
        return
    wait = await store.take_token(caller.name, caller.rate, caller.burst)
    if wait > 0:
        raise Overloaded(
            f"this key sends more than {caller.rate:g} requests per second; retry later",
            retry_after_s=wait,
            code="rate_limited",
        )


RateLimited = Depends(rate_limited)


def fingerprint(*parts: bytes | str) -> str:
    """The request's identity for ``Idempotency-Key``: SHA-256 over its parts."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


async def check_webhook(url: str | None, events: list[str] | None, settings: Settings):
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
) -> JobResult | Response:
    """Run ``work`` as the client asked (see the module docstring)."""
    settings: Settings = request.app.state.settings
    who: Caller = request.state.caller
    store: JobStore = request.app.state.store
    if submission.respond_async:
        record = _record(work, who, BACKGROUND, time.time() + settings.job_timeout_s, submission)
        job, _ = await _create(store, record, work, who, submission)
        return JSONResponse(
            job.public(),
            status_code=202,
            headers={"Location": f"/v1/jobs/{job.id}", "Preference-Applied": "respond-async"},
        )
    timeout = remaining_seconds(request, settings)
    if submission.idempotency is None and submission.webhook is None and served.pool is not None:
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
    job, _ = await _create(store, record, work, who, submission)
    return await unless_disconnected(request, _wait_for(store, job, timeout))


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


async def _create(
    store: JobStore, record: JobRecord, work: Work, who: Caller, submission: Submission
) -> tuple[JobRecord, bool]:
    if isinstance(work, StylizeWork):  # images to encode
        payload = await run_in_threadpool(work.to_payload)
    else:
        payload = work.to_payload()
    return await store.create(
        record, payload, owner_max_jobs=who.max_jobs, idempotency=submission.idempotency
    )


async def _wait_for(store: JobStore, job: JobRecord, timeout_s: float) -> JobResult:
    """Wait for an interactive job's result; past ``timeout_s`` or when the client left,
    the job is cancelled (its batch drops it at the next step)."""
    deadline = time.monotonic() + timeout_s
    finished = False
    try:
        with store.hub.watch(done_topic(job.id)) as changed:
            while True:
                record = await store.get(job.id)
                if record is None:
                    raise JobNotFound("the job was forgotten before it finished")
                if record.finished:
                    finished = True
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DeadlineExceeded(f"no result within {timeout_s:g} s")
                await changed.wait(min(left, REREAD_S))
        if record.state != "succeeded":
            raise error_of_job(record.error)
        data = await store.result(job.id)
        if data is None:
            raise JobNotFound("the job's result was forgotten")
        return await off_loop_if_large(len(data), JobResult.from_bytes, data)
    finally:
        if not finished:
            with contextlib.suppress(StoreError):
                await asyncio.shield(store.cancel(job.id))


# ----------------------------------------------------------------- job routes
async def job_of(job_id: str, store: StoreDep, who: CallerDep) -> JobRecord:
    """The caller's job, or 404 (unknown, expired, or another key's)."""
    record = await store.get(job_id) if len(job_id) <= 64 else None
    if record is None or record.owner != who.name:
        raise JobNotFound(f"no job {job_id[:64]!r} (unknown, or expired after job_ttl_s)")
    return record


JobDep = Annotated[JobRecord, Depends(job_of)]


class ResultCache:
    """Serialized results (base64 JSON) of recent jobs, bounded in bytes.

    A result is encoded once, off the event loop, however many clients ask for it at the
    same time (they wait for the one encoding: encoding holds the GIL, so sixty-four at
    once would starve the event loop even on threads); later reads are plain bytes.
    """

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._held: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._building: dict[str, asyncio.Future] = {}

    async def get(self, job_id: str, build: Callable[[], Awaitable[bytes | None]]) -> bytes | None:
        data = self._held.get(job_id)
        if data is not None:
            self._held.move_to_end(job_id)
            return data
        pending = self._building.get(job_id)
        if pending is not None:
            return await asyncio.shield(pending)
        pending = self._building[job_id] = asyncio.get_running_loop().create_future()
        try:
            data = await build()
        except BaseException as exc:
            pending.set_exception(exc)
            pending.exception()  # retrieved: the waiters re-raise it
            raise
        finally:
            del self._building[job_id]
        pending.set_result(data)
        if data is not None:
            self._put(job_id, data)
        return data

    def _put(self, job_id: str, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        self._held[job_id] = data
        self._bytes += len(data)
        while self._bytes > self.max_bytes:
            _, old = self._held.popitem(last=False)
            self._bytes -= len(old)


def _result_json(packed: bytes) -> bytes:
    result = JobResult.from_bytes(packed)
    body = {
        "media_type": result.media_type,
        "images": [base64.b64encode(image).decode("ascii") for image in result.images],
        **result.fields,
    }
    return json.dumps(body).encode()


async def _job_body(request: Request, store: JobStore, record: JobRecord) -> list[bytes]:
    """The job as JSON, in parts (the result, once it succeeded, is one large part)."""
    head = json.dumps(record.public()).encode()
    result = b"null"
    if record.state == "succeeded":

        async def build() -> bytes | None:
            packed = await store.result(record.id)
            return None if packed is None else await run_in_threadpool(_result_json, packed)

        result = await request.app.state.result_cache.get(record.id, build) or b"null"
    return [head[:-1], b', "result": ', result, b"}"]


@router.get(
    "/jobs/{job_id}",
    summary="A job's state, progress, timings, and its result once it succeeded",
    response_class=Response,
    responses={
        200: {"content": {"application/json": {"schema": {"type": "object"}}}},
        **error_responses(401, 404, 503),
    },
)
async def get_job(request: Request, job: JobDep, store: StoreDep) -> Response:
    return json_bytes_response(await _job_body(request, store, job))


#: Bodies larger than this go out in pieces of this size.
CHUNK_BYTES = 256 * 1024


def json_bytes_response(parts: list[bytes]) -> Response:
    """A JSON body already encoded, in parts. A large one is sent a piece at a time (views
    of the parts, never copies), each after the last left the socket's buffer: many large
    answers at once never pile up megabytes in the event loop's write buffers (which
    Python 3.11 shifts on every partial send)."""
    size = sum(len(part) for part in parts)
    if size <= CHUNK_BYTES:
        return Response(b"".join(parts), media_type="application/json")

    async def pieces() -> AsyncIterator[memoryview]:
        for part in parts:
            view = memoryview(part)
            for start in range(0, len(view), CHUNK_BYTES):
                yield view[start : start + CHUNK_BYTES]

    return StreamingResponse(
        pieces(), media_type="application/json", headers={"Content-Length": str(size)}
    )


@router.delete(
    "/jobs/{job_id}",
    summary="Cancel an unfinished job (it stops at its next sampler step or pass), or "
    "forget a finished one and its result",
    responses={
        200: {"description": "the job, stopped"},
        202: {"description": "the job, asked to stop: it stops at its next step"},
        204: {"description": "a finished job, forgotten"},
        **error_responses(401, 404, 503),
    },
)
async def cancel_job(job: JobDep, store: StoreDep) -> Response:
    if job.finished:
        await store.delete(job.id)
        return Response(status_code=204)
    with store.hub.watch(job_topic(job.id)) as changed:
        record = await store.cancel(job.id) or job
        deadline = time.monotonic() + CANCEL_WAIT_S
        while not record.finished and (left := deadline - time.monotonic()) > 0:
            await changed.wait(min(left, REREAD_S / 4))
            record = await store.get(job.id) or record
    return JSONResponse(record.public(), status_code=200 if record.finished else 202)


class JobList(BaseModel):
    jobs: list[dict] = Field(description="The key's recent async jobs, newest first.")


@router.get(
    "/jobs",
    summary="The calling key's recent async jobs, newest first",
    response_model=JobList,
    responses=error_responses(401, 503),
)
async def list_jobs(
    store: StoreDep, who: CallerDep, limit: Annotated[int, Query(ge=1, le=100)] = 20
) -> JobList:
    return JobList(jobs=[job.public() for job in await store.jobs_of(who.name, limit)])


class Me(BaseModel):
    key: str = Field(description="The name of the API key in use ('anonymous' with none).")
    max_jobs: int = Field(description="Unfinished async jobs this key may hold.")
    rate: float | None = Field(description="Requests per second this key may send.")


@router.get("/me", summary="Which API key is in use, and its limits", response_model=Me)
async def me(who: CallerDep) -> Me:
    return Me(key=who.name, max_jobs=who.max_jobs, rate=who.rate)


# ----------------------------------------------------------------- event streams
class JobFeed:
    """One job's changes, read from the store once per change for every stream here."""

    def __init__(self, store: JobStore, job_id: str) -> None:
        self.store = store
        self.job_id = job_id
        self.streams = 0
        self.latest: tuple[str, str] | None = None
        self.version = 0
        self._changed = asyncio.Event()
        self.task: asyncio.Task | None = None

    def _publish(self, event: str, data: str) -> None:
        self.latest = (event, data)
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def run(self) -> None:
        with self.store.hub.watch(job_topic(self.job_id)) as changed:
            while True:
                try:
                    record = await self.store.get(self.job_id)
                except StoreDown:
                    await changed.wait(REREAD_S)
                    continue
                if record is None:
                    self._publish("gone", json.dumps({"id": self.job_id}))
                    return
                data = json.dumps(record.public())
                if self.latest is None or data != self.latest[1]:
                    self._publish("done" if record.finished else "progress", data)
                if record.finished:
                    return
                await changed.wait(REREAD_S * 5)

    async def wait(self, seen: int, stop: asyncio.Event) -> None:
        """Until a version after ``seen`` exists, or ``stop`` is set."""
        if self.version != seen or stop.is_set():
            return
        changed = asyncio.ensure_future(self._changed.wait())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({changed, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            stopped.cancel()


class JobFeeds:
    """The feeds of this replica, and the bounds on its event streams."""

    def __init__(self, store: JobStore, *, max_streams: int, key_max_streams: int) -> None:
        self.store = store
        self.max_streams = max_streams
        self.key_max_streams = key_max_streams
        self._feeds: dict[str, JobFeed] = {}
        self._by_key: dict[str, int] = defaultdict(int)
        self.open = 0

    def check_room(self, key: str) -> None:
        """Refuse (429) a stream past the replica's or the key's bound; called before the
        answer starts (a refusal inside the stream would cut a 200 short)."""
        if self.open >= self.max_streams:
            raise Overloaded(
                f"{self.max_streams} event streams are open here (max_event_streams); poll "
                "GET /v1/jobs/{id} or retry later",
                retry_after_s=5,
                code="too_many_streams",
            )
        if self._by_key[key] >= self.key_max_streams:
            raise Overloaded(
                f"this key has {self.key_max_streams} event streams open "
                "(key_max_event_streams); close one or poll GET /v1/jobs/{id}",
                retry_after_s=5,
                code="too_many_streams",
            )

    @contextlib.asynccontextmanager
    async def stream(self, job_id: str, key: str) -> AsyncIterator[JobFeed]:
        """Follow ``job_id``'s feed (started for the first stream, stopped after the last)."""
        feed = self._feeds.get(job_id)
        if feed is None:
            feed = self._feeds[job_id] = JobFeed(self.store, job_id)
            feed.task = asyncio.get_running_loop().create_task(feed.run())
        feed.streams += 1
        self.open += 1
        self._by_key[key] += 1
        try:
            yield feed
        finally:
            feed.streams -= 1
            self.open -= 1
            self._by_key[key] -= 1
            if self._by_key[key] == 0:
                del self._by_key[key]
            if feed.streams == 0:
                feed.task.cancel()
                del self._feeds[job_id]


async def stream_room(request: Request, job: JobDep) -> JobRecord:
    """The job, once there is room for another event stream of its key (else 429)."""
    request.app.state.feeds.check_room(job.owner)
    return job


@router.get(
    "/jobs/{job_id}/events",
    summary="Server-Sent Events: 'progress' at each change, then one 'done' with the job",
    response_class=EventSourceResponse,
    responses={
        status: {
            "description": entry["description"],
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        }
        for status, entry in error_responses(401, 404, 429, 503).items()
    },
)
async def job_events(
    request: Request, job: Annotated[JobRecord, Depends(stream_room)]
) -> AsyncIterator[ServerSentEvent]:
    feeds: JobFeeds = request.app.state.feeds
    exempt = request.scope.get("state", {}).get("exempt_from_connection_cap")
    if exempt is not None:
        exempt()  # a long stream must not hold one of max_connections' places
    stop = request.app.state.lifecycle.drain_started
    async with feeds.stream(job.id, job.owner) as feed:
        seen = 0
        while True:
            await feed.wait(seen, stop)
            if feed.version != seen and feed.latest is not None:
                seen = feed.version
                event, data = feed.latest
                yield ServerSentEvent(event=event, raw_data=data)
                if event in ("done", "gone"):
                    return
            elif stop.is_set():
                # this replica is stopping: the client reconnects (to another replica)
                yield ServerSentEvent(event="reconnect", raw_data="{}", retry=1000)
                return


__all__ = [
    "CallerDep",
    "CatalogDep",
    "IdempotencyKey",
    "JobFeeds",
    "RateLimited",
    "RespondAsync",
    "ResultCache",
    "Submission",
    "answer",
    "check_webhook",
    "fingerprint",
    "router",
    "service_error_of",
]

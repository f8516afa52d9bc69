"""The routes' shared dependencies, as ``Annotated`` aliases: settings, the job store,
the model catalog, the caller's key, the request's executor (how its work runs), and
the request headers every work route reads (``Prefer``, ``Idempotency-Key``) with the
caller's rate limit. A work route takes them together as :data:`WorkDep`. The rest of
the app's parts a route uses (metrics, the drain state, the event-stream feeds, the
decode slots, the models loaded here) and the caches a route module keeps per app
(:func:`app_owned`) come from here too.

This is the one module that reads the application's state (``request.app.state``;
``tests/test_smoke_layout.py`` checks it): the routes are handed what they need as
dependencies, and what lies below them reads none of it either.

They are ``async def``: FastAPI runs a plain ``def`` dependency on a worker thread, a
thread hop per request for reading an attribute.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Protocol, TypeVar

from fastapi import Depends, Header, Request
from starlette.types import Receive

from service.config import Settings
from service.errors import Overloaded, ValidationFailed
from service.execution.executor import Executor, ModelCatalog, Submission
from service.images import DecodeSlots
from service.jobs.feeds import JobFeeds
from service.jobs.store import JobStore
from service.keys import Caller
from service.metrics import Metrics
from service.workers.loading import ModelStatus
from service.workers.pool import AnyWorkerPool

T = TypeVar("T")


#: A dependency that gives one part of the app.
AppPart = Callable[[Request], Awaitable[T]]


def _app_part(name: str) -> AppPart[Any]:
    """A dependency giving the app's part kept on its state as ``name`` (set by
    ``service.app`` at start-up or by its lifespan); its alias names the type."""

    async def part(request: Request) -> Any:
        return getattr(request.app.state, name)

    part.__name__ = name
    return part


app_settings: AppPart[Settings] = _app_part("settings")
job_store: AppPart[JobStore] = _app_part("store")
catalog: AppPart[ModelCatalog] = _app_part("catalog")
app_metrics: AppPart[Metrics] = _app_part("metrics")
#: One reader per followed job, feeding its event streams (made by the lifespan).
job_feeds: AppPart[JobFeeds] = _app_part("feeds")
#: The app's shared slots for decoding uploads (large images one at a time).
decode_slots: AppPart[DecodeSlots] = _app_part("decode_slots")
SettingsDep = Annotated[Settings, Depends(app_settings)]


async def caller(request: Request) -> Caller:
    """The key the request came with (``service.app``'s middleware sets it)."""
    who: Caller = request.state.caller
    return who


StoreDep = Annotated[JobStore, Depends(job_store)]
CatalogDep = Annotated[ModelCatalog, Depends(catalog)]
CallerDep = Annotated[Caller, Depends(caller)]


async def store_if_open(request: Request) -> JobStore | None:
    """The job store, or ``None`` before the app's lifespan has opened it (the probes
    and ``/metrics`` answer then too)."""
    store: JobStore | None = getattr(request.app.state, "store", None)
    return store


class DrainState(Protocol):
    """What the routes read of the app's ``Lifecycle`` (``service.app``)."""

    #: ``/readyz`` answers 503 (a load balancer takes the replica out of rotation)
    leaving: bool
    #: set once draining begins: event streams end so that clients reconnect elsewhere
    drain_started: asyncio.Event


async def drain_state(request: Request) -> DrainState:
    state: DrainState = request.app.state.lifecycle
    return state


@dataclass(frozen=True)
class LocalModels:
    """The models this process was asked to load: each one's load result, and the pools
    of those it serves (both empty before the lifespan has loaded them)."""

    statuses: Mapping[str, ModelStatus]
    pools: Mapping[str, AnyWorkerPool]


async def local_models(request: Request) -> LocalModels:
    return LocalModels(request.app.state.model_status, request.app.state.pools)


OpenStoreDep = Annotated[JobStore | None, Depends(store_if_open)]
MetricsDep = Annotated[Metrics, Depends(app_metrics)]
DrainDep = Annotated[DrainState, Depends(drain_state)]
FeedsDep = Annotated[JobFeeds, Depends(job_feeds)]
DecodeSlotsDep = Annotated[DecodeSlots, Depends(decode_slots)]
LocalModelsDep = Annotated[LocalModels, Depends(local_models)]


def app_owned(name: str, make: Callable[[], T]) -> Callable[[Request], Awaitable[T]]:
    """A dependency giving the app's one ``make()`` (a cache a route module keeps, such
    as its thumbnails), made on first use and kept on the app's state as ``name``.

    The route module owns the class and names the dependency
    (``Annotated[Thumbnails, Depends(app_owned("job_thumbnails", Thumbnails))]``), so
    this module needs no import of the routes.
    """

    async def held(request: Request) -> T:
        value: T | None = getattr(request.app.state, name, None)
        if value is None:
            value = make()
            setattr(request.app.state, name, value)
        return value

    held.__name__ = f"app_owned_{name}"
    return held


async def disconnected(receive: Receive) -> None:
    """Return once the client has gone (the request's body is read already: its
    ``receive`` then only answers ``http.disconnect``, when the connection closes)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def executor(
    request: Request, settings: SettingsDep, store: StoreDep, who: CallerDep
) -> Executor:
    """The request's executor: the app's job store, job runner and preparation budget,
    with the request's caller, arrival time and connection (its work is cancelled when
    the client goes)."""
    return Executor(
        settings,
        store,
        request.app.state.runner,
        request.app.state.preparation,
        caller=who,
        started=getattr(request.state, "started", None),
        client_gone=partial(disconnected, request.receive),
    )


ExecutorDep = Annotated[Executor, Depends(executor)]


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


@dataclass(frozen=True)
class WorkContext:
    """What a work route (``/v1/generate``, ``/v1/stylize``) is handed besides its own
    fields: the request, the settings, the model catalog, the request's executor, and
    the two headers that decide how its work is answered."""

    request: Request
    settings: Settings
    models: ModelCatalog
    executor: Executor
    #: ``Prefer: respond-async``: answer 202 with a job
    respond_async: bool
    #: ``Idempotency-Key``, checked
    idempotency_key: str | None

    def submission(
        self,
        identity: Sequence[bytes | str],
        *,
        webhook: dict[str, Any] | None,
        previews: bool = False,
    ) -> Submission:
        """The request's submission; with an ``Idempotency-Key``, the request is known
        by its route and ``identity`` (its fields and uploads)."""
        return Submission.of(
            respond_async=self.respond_async,
            idempotency_key=self.idempotency_key,
            identity=[self.request.url.path, *identity],
            webhook=webhook,
            previews=previews,
        )


async def work_context(
    request: Request,
    settings: SettingsDep,
    models: CatalogDep,
    executor: ExecutorDep,
    respond_async: RespondAsync,
    idempotency_key: IdempotencyKey,
) -> WorkContext:
    return WorkContext(request, settings, models, executor, respond_async, idempotency_key)


WorkDep = Annotated[WorkContext, Depends(work_context)]

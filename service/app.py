"""The FastAPI application: ``create_app(settings)``.

In ``lifespan`` (never at import) the app opens its job store (SQLite under
``state_dir``, or Redis at ``redis_url``), loads its models, one ``WorkerPool`` per
model, and, where any loaded, starts a job runner that takes their jobs from the store;
every replica also reaps dead workers' jobs and delivers due webhooks. The outermost
middleware gives every request an id (``X-Request-ID``, echoed or made up), one
structured log line, metrics, the drain gate (once shutdown begins, new work gets 503
while reads of jobs and the requests in flight go on), the API key check (who the
caller is), and the body limits (the streamed upload cap, the smaller cap of non-upload
bodies, and the body deadline), in that order and before the app reads any of the body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.config import Settings
from service.errors import (
    PayloadTooLarge,
    RequestTimeout,
    ShuttingDown,
    install_error_handlers,
)
from service.execution.executor import ModelCatalog
from service.execution.runner import JobRunner, reap_forever, worker_name
from service.images import DecodeSlots, PreparationBudget
from service.jobs.blobs.configured import open_blobs
from service.jobs.feeds import JobFeeds
from service.jobs.redis_store import RedisJobStore
from service.jobs.sqlite_store import SqliteJobStore
from service.jobs.store import JobStore, StoreLimits
from service.jobs.webhooks import WebhookDispatcher, WebhookPolicy, WebhookSettings
from service.keys import KeyRing, bearer_token, caller_of, needs_api_key, unauthorized
from service.metrics import Metrics
from service.routes import generate, health, jobs, models, openai_images, page, samples, stylize
from service.workers.loading import build_pools, load_models
from service.workers.registry import MODELS, AnyModelEntry

logger = logging.getLogger("atelier.app")
access_logger = logging.getLogger("atelier.access")

STATIC_DIR = Path(__file__).resolve().parent / "static"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
#: Paths that still answer while draining (probes and scrapes).
_ALWAYS_OPEN = ("/healthz", "/readyz", "/metrics")


#: The route whose uploads may be ``max_stylize_upload_bytes`` (print-size photos).
STYLIZE_PATH = "/v1/stylize"


class Lifecycle:
    """Drain state shared by the middleware, the probes and the CLI's signal handler.

    A stop has two phases: first ``leaving`` (``/readyz`` answers 503 so a load balancer
    takes the replica out of rotation, while new requests are still served), then
    ``draining`` (new requests get 503 while those in flight finish).
    """

    def __init__(self) -> None:
        self.leaving = False
        self.draining = False
        self.in_flight = 0
        #: set once draining begins (event streams end so clients reconnect elsewhere)
        self.drain_started = asyncio.Event()
        self._hooks: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self._work: list[asyncio.Task[None]] = []
        #: the app's event loop (``lifespan`` sets it): drain work starts there
        self.loop: asyncio.AbstractEventLoop | None = None

    def on_drain(self, hook: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``hook`` (e.g. the job runner's drain) when draining begins."""
        self._hooks.append(hook)

    @property
    def busy(self) -> bool:
        """Whether drain work (running jobs) is still going on."""
        return any(not task.done() for task in self._work)

    async def drained(self) -> None:
        await asyncio.gather(*self._work, return_exceptions=True)

    def begin_leaving(self) -> None:
        if not self.leaving:
            logger.info("leaving: not ready, still serving", extra={"in_flight": self.in_flight})
        self.leaving = True

    def begin_drain(self) -> None:
        """Refuse new work from now on and start the drain hooks (from any thread)."""
        if not self.draining:
            logger.info("draining: new work gets 503", extra={"in_flight": self.in_flight})
            if self.loop is not None:
                try:
                    here = asyncio.get_running_loop()
                except RuntimeError:
                    here = None
                if here is self.loop:
                    self._start_drain_work()
                else:
                    self.loop.call_soon_threadsafe(self._start_drain_work)
        self.leaving = True
        self.draining = True

    def _start_drain_work(self) -> None:
        if self.drain_started.is_set() or self.loop is None:
            return
        self.drain_started.set()
        self._work = [self.loop.create_task(hook()) for hook in self._hooks]


class RequestContextMiddleware:
    """Request id, access log, metrics, drain gate, API key, body limits (pure ASGI)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: Metrics,
        lifecycle: Lifecycle,
        settings: Settings,
        keys: KeyRing,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.lifecycle = lifecycle
        self.settings = settings
        self.keys = keys

    def _body_limit(self, headers: Headers, path: str) -> int:
        """Uploads to ``/v1/stylize`` may be ``max_stylize_upload_bytes``, other uploads
        ``max_upload_bytes``; any other body (JSON) ``max_json_bytes``."""
        if headers.get("content-type", "").lower().startswith("multipart/form-data"):
            if path == STYLIZE_PATH:
                return self.settings.max_stylize_upload_bytes
            return self.settings.max_upload_bytes
        return min(self.settings.max_upload_bytes, self.settings.max_json_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = Headers(scope=scope)
        incoming_id = headers.get("x-request-id", "")
        request_id = incoming_id if _REQUEST_ID.match(incoming_id) else uuid.uuid4().hex
        scope.setdefault("state", {}).update(request_id=request_id, started=time.monotonic())
        status = 500
        key_name = ""

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)["X-Request-ID"] = request_id
            await send(message)

        self.lifecycle.in_flight += 1
        self.metrics.in_flight.inc()
        try:
            rejection = self._reject_early(scope, headers)
            caller = scope["state"].get("caller")
            key_name = caller.name if caller is not None else ""
            if rejection is not None:
                await rejection(scope, receive, send_with_id)
            else:
                await self.app(
                    scope,
                    self._capped(receive, self._body_limit(headers, scope["path"])),
                    send_with_id,
                )
        finally:
            self.lifecycle.in_flight -= 1
            self.metrics.in_flight.dec()
            seconds = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.observe_request(scope["method"], route, status, seconds, key_name)
            access_logger.info(
                "request",
                extra={
                    "request_id": request_id,
                    "method": scope["method"],
                    "path": scope["path"],
                    "route": route,
                    "status": status,
                    "key": key_name,
                    "duration_ms": round(seconds * 1000.0, 2),
                },
            )

    def _reject_early(self, scope: Scope, headers: Headers) -> JSONResponse | None:
        if (
            self.lifecycle.draining
            and scope["method"] == "POST"
            and scope["path"] not in _ALWAYS_OPEN
        ):
            return ShuttingDown("the service is shutting down").response()
        if needs_api_key(scope["path"], scope["method"], self.settings, self.keys):
            token = bearer_token(headers)
            key = self.keys.identify(token) if token is not None else None
            if key is None:
                return unauthorized().response()
            scope["state"]["caller"] = caller_of(key, self.settings)
        elif not self.keys.required:
            scope["state"]["caller"] = caller_of(None, self.settings)
        limit = self._body_limit(headers, scope["path"])
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return PayloadTooLarge(f"the body is over {limit} bytes").response()
        return None

    def _capped(self, receive: Receive, limit: int) -> Receive:
        """``receive`` that enforces the body limits while the body streams in.

        Raises ``PayloadTooLarge`` as soon as the body passes ``max_upload_bytes``, and
        ``RequestTimeout`` when the whole body has not arrived ``body_timeout_s`` after
        the request began (a total, so a client trickling a byte at a time cannot hold
        the request open). Once the body is complete, ``receive`` passes through
        untouched (it then only reports a disconnect).
        """
        received = 0
        timeout_s = self.settings.body_timeout_s
        deadline = time.monotonic() + timeout_s
        body_done = False

        async def capped_receive() -> Message:
            nonlocal received, body_done
            if body_done:
                return await receive()
            try:
                async with asyncio.timeout(deadline - time.monotonic()):
                    message = await receive()
            except TimeoutError:
                raise RequestTimeout(f"the body did not arrive within {timeout_s:g} s") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > limit:
                    raise PayloadTooLarge(f"the body is over {limit} bytes")
            return message

        return capped_receive


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any ``extra`` fields."""

    _STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        payload.update({k: v for k, v in vars(record).items() if k not in self._STANDARD})
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def configure_logging(level: str = "info") -> None:
    """Send the ``atelier`` loggers to stderr as JSON lines."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLogFormatter())
    root = logging.getLogger("atelier")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def open_store(settings: Settings) -> JobStore:
    """The job store the settings name: Redis at ``redis_url``, else SQLite under
    ``state_dir``; its big inputs and results in the blob store ``blob_store``."""
    limits = StoreLimits(
        max_jobs=settings.max_jobs,
        inputs_max_bytes=settings.job_inputs_max_bytes,
        results_max_bytes=settings.job_results_max_bytes,
        ttl_s=settings.job_ttl_s,
        max_attempts=settings.job_max_attempts,
        idempotency_ttl_s=settings.idempotency_ttl_s,
    )
    blobs = open_blobs(
        settings.blob_store,
        folder=settings.blob_folder(),
        bucket=settings.blob_s3_bucket,
        prefix=settings.blob_s3_prefix,
        endpoint_url=settings.blob_s3_endpoint_url,
    )
    if settings.redis_url:
        return RedisJobStore(
            settings.redis_url,
            limits,
            prefix=settings.redis_prefix,
            blobs=blobs,
            webhook_progress_interval_s=settings.webhook_progress_interval_s,
            call_timeout_s=settings.store_call_timeout_s,
            probe_interval_s=settings.store_probe_interval_s,
        )
    return SqliteJobStore(
        settings.state_dir / "jobs.db",
        limits,
        blobs=blobs,
        webhook_progress_interval_s=settings.webhook_progress_interval_s,
        call_timeout_s=settings.store_call_timeout_s,
        probe_interval_s=settings.store_probe_interval_s,
    )


def webhook_settings(settings: Settings) -> WebhookSettings:
    return WebhookSettings(
        WebhookPolicy.of(settings),
        settings.webhook_secret,
        timeout_s=settings.webhook_timeout_s,
        max_attempts=settings.webhook_max_attempts,
        retry_base_s=settings.webhook_retry_base_s,
    )


def create_app(
    settings: Settings | None = None,
    *,
    model_entries: Mapping[str, AnyModelEntry] | None = None,
    api: bool = True,
) -> FastAPI:
    """Build the application.

    Args:
        settings: configuration; the process settings (environment) by default.
        model_entries: how to load and run each model by name (tests inject fakes);
            ``service.workers.registry.MODELS`` by default.
        api: whether to serve the API; ``atelier worker`` serves only the probes and
            ``/metrics`` (an API-only replica is the reverse: ``load_models`` empty).
    """
    settings = settings or Settings()
    entries = dict(model_entries if model_entries is not None else MODELS)
    metrics = Metrics()
    lifecycle = Lifecycle()
    keys = KeyRing(settings.api_keys_file, settings.api_key)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        lifecycle.loop = asyncio.get_running_loop()
        store = open_store(settings)
        await store.start()
        loaded, statuses = await asyncio.to_thread(load_models, settings, entries)
        pools = build_pools(loaded, entries, settings, metrics, statuses)
        for pool in pools.values():
            pool.start()
        runner = JobRunner(store, pools, metrics, settings, worker=worker_name())
        await runner.start()
        reaper = asyncio.get_running_loop().create_task(
            reap_forever(store, settings.job_lease_s / 3)
        )
        dispatcher = WebhookDispatcher(store, webhook_settings(settings))
        dispatcher.start()
        app.state.store = store
        app.state.runner = runner
        app.state.pools = pools
        app.state.model_status = statuses
        app.state.catalog = ModelCatalog(pools, statuses, store)
        app.state.feeds = JobFeeds(
            store,
            max_streams=settings.max_event_streams,
            key_max_streams=settings.key_max_event_streams,
        )
        lifecycle.on_drain(lambda: runner.drain(max(0.0, settings.shutdown_timeout_s - 2.0)))
        try:
            yield
        finally:
            lifecycle.begin_drain()
            lifecycle._start_drain_work()  # at once, if begin_drain came from elsewhere
            await lifecycle.drained()
            await asyncio.gather(*(pool.close() for pool in pools.values()))
            reaper.cancel()
            await dispatcher.close()
            await store.close()
            logger.info("workers stopped")

    app = FastAPI(
        title="Atelier",
        version="0.1.0",
        summary="Arbitrary style transfer and text-to-image generation.",
        lifespan=lifespan,
        redirect_slashes=False,  # a redirect would be built from the client's Host header
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.lifecycle = lifecycle
    app.state.keys = keys
    app.state.decode_slots = DecodeSlots(
        settings.max_concurrent_decodes, settings.large_image_pixels
    )
    app.state.preparation = PreparationBudget(settings.max_preparing_pixels)
    app.state.pools = {}
    app.state.model_status = {}
    install_error_handlers(app)

    app.include_router(health.router)
    if api:
        for module in (page, samples, models, stylize, generate, jobs, openai_images):
            app.include_router(module.router)
        app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=[
                "Authorization",
                "Content-Type",
                "Accept",
                "X-Request-ID",
                "Prefer",
                "Idempotency-Key",
            ],
            expose_headers=["X-Request-ID", "Retry-After", "X-Seed", "Location"],
        )
    app.add_middleware(
        RequestContextMiddleware,
        metrics=metrics,
        lifecycle=lifecycle,
        settings=settings,
        keys=keys,
    )
    return app

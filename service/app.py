"""The FastAPI application: ``create_app(settings)``.

Models load in ``lifespan`` (never at import), one ``WorkerPool`` per model. The
outermost middleware gives every request an id (``X-Request-ID``, echoed or made up),
one structured log line, metrics, the drain gate (once shutdown begins new requests
get 503 while the ones in flight finish), the API key check, and the body limits
(the streamed upload cap and the body deadline), in that order and before the app
reads any of the body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.auth import has_valid_key, needs_api_key, unauthorized
from service.config import Settings, get_settings
from service.errors import (
    PayloadTooLarge,
    RequestTimeout,
    error_response,
    install_error_handlers,
)
from service.images import DecodeSlots
from service.jobs import JobStore
from service.metrics import Metrics
from service.routes import generate, health, jobs, models, openai_images, page, stylize
from service.workers import MODELS, ModelEntry, build_pools, load_models

logger = logging.getLogger("atelier.app")
access_logger = logging.getLogger("atelier.access")

STATIC_DIR = Path(__file__).resolve().parent / "static"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
#: Paths that still answer while draining (probes and scrapes).
_ALWAYS_OPEN = ("/healthz", "/readyz", "/metrics")


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

    def begin_leaving(self) -> None:
        if not self.leaving:
            logger.info("leaving: not ready, still serving", extra={"in_flight": self.in_flight})
        self.leaving = True

    def begin_drain(self) -> None:
        if not self.draining:
            logger.info("draining: new requests get 503", extra={"in_flight": self.in_flight})
        self.leaving = True
        self.draining = True


class RequestContextMiddleware:
    """Request id, access log, metrics, drain gate, API key, body limits (pure ASGI)."""

    def __init__(
        self, app: ASGIApp, *, metrics: Metrics, lifecycle: Lifecycle, settings: Settings
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.lifecycle = lifecycle
        self.settings = settings
        self.max_body_bytes = settings.max_upload_bytes

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
            if rejection is not None:
                await rejection(scope, receive, send_with_id)
            else:
                await self.app(scope, self._capped(receive), send_with_id)
        finally:
            self.lifecycle.in_flight -= 1
            self.metrics.in_flight.dec()
            seconds = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.observe_request(scope["method"], route, status, seconds)
            access_logger.info(
                "request",
                extra={
                    "request_id": request_id,
                    "method": scope["method"],
                    "path": scope["path"],
                    "route": route,
                    "status": status,
                    "duration_ms": round(seconds * 1000.0, 2),
                },
            )

    def _reject_early(self, scope: Scope, headers: Headers):
        if self.lifecycle.draining and scope["path"] not in _ALWAYS_OPEN:
            return error_response(503, "shutting_down", "the service is shutting down")
        expected = self.settings.api_key
        if needs_api_key(scope["path"], scope["method"], self.settings) and not has_valid_key(
            headers, expected
        ):
            refusal = unauthorized()
            return error_response(401, refusal.code, refusal.message, refusal.headers)
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            return error_response(
                413, "payload_too_large", f"the body is over {self.max_body_bytes} bytes"
            )
        return None

    def _capped(self, receive: Receive) -> Receive:
        """``receive`` that enforces the body limits while the body streams in.

        Raises ``PayloadTooLarge`` as soon as the body passes ``max_upload_bytes``, and
        ``RequestTimeout`` when the whole body has not arrived ``body_timeout_s`` after
        the request began (a total, so a client trickling a byte at a time cannot hold
        the request open). Once the body is complete, ``receive`` passes through
        untouched (it then only reports a disconnect).
        """
        received = 0
        limit = self.max_body_bytes
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


def create_app(
    settings: Settings | None = None, *, model_entries: Mapping[str, ModelEntry] | None = None
) -> FastAPI:
    """Build the application.

    Args:
        settings: configuration; the process settings (environment) by default.
        model_entries: how to load and run each model by name (tests inject fakes);
            ``service.workers.MODELS`` by default.
    """
    settings = settings or get_settings()
    entries = dict(model_entries if model_entries is not None else MODELS)
    metrics = Metrics()
    lifecycle = Lifecycle()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loaded, statuses = await asyncio.to_thread(load_models, settings, entries)
        pools = build_pools(loaded, entries, settings, metrics, statuses)
        for pool in pools.values():
            pool.start()
        app.state.pools = pools
        app.state.model_status = statuses
        try:
            yield
        finally:
            lifecycle.begin_drain()
            await asyncio.gather(*(pool.close() for pool in pools.values()))
            await app.state.jobs.close()
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
    app.state.jobs = JobStore(
        max_jobs=settings.max_jobs,
        ttl_s=settings.job_ttl_s,
        results_max_bytes=settings.job_results_max_bytes,
        timeout_s=settings.job_timeout_s,
    )
    app.state.decode_slots = DecodeSlots(
        settings.max_concurrent_decodes, settings.large_image_pixels
    )
    app.state.pools = {}
    app.state.model_status = {}
    install_error_handlers(app)
    for module in (page, health, models, stylize, generate, jobs, openai_images):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Accept", "X-Request-ID", "Prefer"],
            expose_headers=["X-Request-ID", "Retry-After", "X-Seed", "Location"],
        )
    app.add_middleware(
        RequestContextMiddleware,
        metrics=metrics,
        lifecycle=lifecycle,
        settings=settings,
    )
    return app

"""Thin HTTP handlers: parse and validate, submit to a worker pool, encode the answer.

Shared dependencies live here as ``Annotated`` aliases.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, TypeVar

import anyio
import anyio.to_thread
from fastapi import Depends, FastAPI, Request

from service.config import Settings
from service.errors import DeadlineExceeded, NotReady
from service.workers import WorkerPool


def app_settings(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(app_settings)]


def pool_of(name: str) -> Callable[[Request], WorkerPool]:
    """A dependency yielding the named model's pool, or a 503 when it is not loaded."""

    def dependency(request: Request) -> WorkerPool:
        pool = request.app.state.pools.get(name)
        if pool is None:
            status = request.app.state.model_status.get(name)
            reason = status.error if status is not None and status.error else "not requested"
            raise NotReady(f"model {name!r} is not loaded ({reason})", code="model_not_loaded")
        return pool

    return dependency


def remaining_seconds(request: Request, settings: Settings) -> float:
    """What is left of ``request_timeout_s`` since the request arrived (504 when none)."""
    started = getattr(request.state, "started", None) or time.monotonic()
    left = settings.request_timeout_s - (time.monotonic() - started)
    if left <= 0:
        raise DeadlineExceeded(f"no time left of the {settings.request_timeout_s:g} s deadline")
    return left


T = TypeVar("T")


def _decode_slots(app: FastAPI) -> anyio.CapacityLimiter:
    """The app's limiter of concurrent decodes (made on first use: it needs a running loop)."""
    slots = getattr(app.state, "decode_slots", None)
    if slots is None:
        slots = anyio.CapacityLimiter(app.state.settings.max_concurrent_decodes)
        app.state.decode_slots = slots
    return slots


async def run_decode(request: Request, work: Callable[[], T]) -> T:
    """Run image decoding ``work`` in a thread, at most ``max_concurrent_decodes`` at once.

    Decoding is the one step whose memory grows with what a client sends (a full-size
    decode of a ``max_pixels`` upload), so bounding how many run at once bounds that
    memory. A slot is held until its thread finishes, even when the request is
    cancelled meanwhile. Waiting for a slot counts against the request's deadline (504).
    """
    settings = request.app.state.settings
    try:
        with anyio.fail_after(remaining_seconds(request, settings)):
            return await anyio.to_thread.run_sync(work, limiter=_decode_slots(request.app))
    except TimeoutError:
        raise DeadlineExceeded(
            f"no time left of the {settings.request_timeout_s:g} s deadline"
        ) from None

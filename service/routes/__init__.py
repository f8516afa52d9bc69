"""Thin HTTP handlers: parse and validate, submit to a worker pool, encode the answer.

Shared dependencies live here as ``Annotated`` aliases.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

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


def deadline_of(request: Request, settings: Settings) -> float:
    """The ``time.monotonic()`` at which the request's ``request_timeout_s`` runs out."""
    return time.monotonic() + remaining_seconds(request, settings)


def remaining_seconds(request: Request, settings: Settings) -> float:
    """What is left of ``request_timeout_s`` since the request arrived (504 when none)."""
    started = getattr(request.state, "started", None) or time.monotonic()
    left = settings.request_timeout_s - (time.monotonic() - started)
    if left <= 0:
        raise DeadlineExceeded(f"no time left of the {settings.request_timeout_s:g} s deadline")
    return left

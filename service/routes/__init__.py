"""Thin HTTP handlers: parse and validate, submit to a worker pool, encode the answer.

Shared dependencies live here as ``Annotated`` aliases.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from pydantic import BaseModel, Field

from service.config import Settings
from service.errors import ClientClosedRequest, DeadlineExceeded

T = TypeVar("T")


async def app_settings(request: Request) -> Settings:
    # Dependencies are async: FastAPI runs a plain ``def`` one on a worker thread, a
    # thread hop per request for reading an attribute.
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(app_settings)]


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


async def _disconnected(request: Request) -> None:
    """Return once the client has gone (the body is read already: ``receive`` then only
    answers ``http.disconnect``, when the connection closes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work`` while watching the connection; when the client goes first, cancel
    ``work`` (its jobs leave the queue, or their batch at the next step) and raise
    ``ClientClosedRequest`` (logged as 499).

    Call it only after the request body has been read.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise ClientClosedRequest("the client closed the connection: its work was cancelled")
    return task.result()


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. 'validation_error'.")
    message: str = Field(description="What was wrong, for a person.")


class ErrorBody(BaseModel):
    """The service's error envelope (``service.errors``), as the OpenAPI schema shows it."""

    error: ErrorDetail


#: What each error status means, for the OpenAPI description of every route.
ERROR_DESCRIPTIONS = {
    400: "bad input: an upload that is not a usable image, a body that does not parse, "
    "input the model refused",
    401: "an API key is configured and the request lacks a valid one",
    404: "no such job: unknown, expired, or another key's",
    409: "an Idempotency-Key replay whose first request's job was forgotten",
    413: "the body is over max_upload_bytes, or an image is over max_pixels",
    415: "not an image format the service reads, or not multipart",
    422: "a field of the wrong type, out of range, or the wrong count",
    429: "a queue or a job limit is full, the key's rate or stream limit is reached: retry "
    "after Retry-After seconds",
    503: "the model is not served, the job store is unreachable, or the service is shutting down",
    504: "the request waited past request_timeout_s",
}
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}


def error_responses(*statuses: int, model: type | object = ErrorBody) -> dict[int, dict]:
    """``responses=`` entries documenting ``statuses`` with the error body ``model``."""
    return {
        status: {
            "model": model,
            "description": ERROR_DESCRIPTIONS[status],
            **({"headers": _RETRY_AFTER} if status == 429 else {}),
        }
        for status in statuses
    }

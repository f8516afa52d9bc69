"""A request's work, cancelled when its client goes away (logged as 499)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import Request

from service.errors import ClientClosedRequest

T = TypeVar("T")


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

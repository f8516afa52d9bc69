"""The asynchronous client: :class:`AsyncClient`, the same calls as
:class:`~atelier_client.Client` (same arguments, same rules for jobs, retries and
results, written once in :mod:`atelier_client._calls`), awaited: the flows' I/O goes
through ``httpx.AsyncClient`` and ``asyncio.sleep``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import httpx

from atelier_client import _flow
from atelier_client._calls import Calls
from atelier_client._core import Event
from atelier_client.types import Job


class AsyncClient(_flow.AsyncRunner, Calls[httpx.AsyncBaseTransport]):
    """A client of one Atelier server for asyncio code; see :class:`~atelier_client.Client`
    for the arguments."""

    _http: httpx.AsyncClient
    _http_client = httpx.AsyncClient

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def events(self, job_id: str | Job) -> AsyncGenerator[Event, None]:
        """The job's Server-Sent Events as they come (``progress``, ``preview``,
        ``done``; ``reconnect`` when the replica stops), one connection."""
        return self._drive(_flow.Course(self._events(job_id)))

    async def _run(self, flow: _flow.Flow[_flow.T]) -> _flow.T:
        course = _flow.Course(flow)
        async for _ in self._drive(course):
            raise TypeError("only a streamed call emits")
        return course.result

    async def _drive(self, course: _flow.Course[Any]) -> AsyncGenerator[Any, None]:
        """Answer the flow's ops until it returns, handing out what it emits."""
        try:
            while course.op is not None:
                if isinstance(course.op, _flow.Emit):
                    yield course.take()
                else:
                    await self._step(course)
        finally:
            for response in course.opened:
                await response.aclose()

    async def _step(self, course: _flow.Course[Any]) -> None:
        """Answer the op the flow waits on (or throw its error into the flow)."""
        assert course.op is not None
        try:
            answer = await self._io(course.op)
        except BaseException as exc:  # a broken connection, a cancel: the flow decides
            course.fail(exc)
        else:
            course.answer(answer)

    async def _io(self, op: _flow.Op) -> Any:
        match op:
            case _flow.Send(method, path, options, stream):
                request = self._http.build_request(method, path, **options)
                return await self._http.send(request, stream=stream)
            case _flow.Body(response, "all"):
                return await response.aread()
            case _flow.Body(response, "lines"):
                return response.aiter_lines()
            case _flow.Body(response, "bytes"):
                return response.aiter_bytes()
            case _flow.Body(response, "close"):
                return await response.aclose()
            case _flow.Next(source):
                return await anext(source, None)
            case _flow.Sleep(seconds):
                return await asyncio.sleep(seconds)
        raise TypeError(f"{op!r} is not an op this client runs")

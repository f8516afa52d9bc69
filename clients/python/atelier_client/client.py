"""The synchronous client: :class:`Client`, the calls of :mod:`atelier_client._calls`
answered with blocking I/O (``httpx.Client``, ``time.sleep``)."""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import httpx

from atelier_client import _flow
from atelier_client._calls import Calls
from atelier_client._core import Event
from atelier_client.types import Job


class Client(_flow.SyncRunner, Calls[httpx.BaseTransport]):
    """A client of one Atelier server.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000`` (default: ``ATELIER_SERVER``,
            else that URL).
        api_key: sent as ``Authorization: Bearer`` (default: ``ATELIER_API_KEY``).
        timeout: seconds to wait for an answer (a request answered at once runs within
            the server's own deadline, 60 s by default).
        retry: when to try again (:class:`~atelier_client.Retry`).
        transport: an ``httpx`` transport (tests, proxies).
    """

    _http: httpx.Client
    _http_client = httpx.Client

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def events(self, job_id: str | Job) -> Generator[Event, None, None]:
        """The job's Server-Sent Events as they come (``progress``, ``preview``,
        ``done``; ``reconnect`` when the replica stops), one connection."""
        return self._drive(_flow.Course(self._events(job_id)))

    def _run(self, flow: _flow.Flow[_flow.T]) -> _flow.T:
        course = _flow.Course(flow)
        for _ in self._drive(course):
            raise TypeError("only a streamed call emits")
        return course.result

    def _drive(self, course: _flow.Course[Any]) -> Generator[Any, None, None]:
        """Answer the flow's ops until it returns, handing out what it emits."""
        try:
            while course.op is not None:
                if isinstance(course.op, _flow.Emit):
                    yield course.take()
                else:
                    self._step(course)
        finally:
            for response in course.opened:
                response.close()

    def _step(self, course: _flow.Course[Any]) -> None:
        """Answer the op the flow waits on (or throw its error into the flow)."""
        assert course.op is not None
        try:
            answer = self._io(course.op)
        except BaseException as exc:  # a broken connection, an interrupt: the flow decides
            course.fail(exc)
        else:
            course.answer(answer)

    def _io(self, op: _flow.Op) -> Any:
        match op:
            case _flow.Send(method, path, options, stream):
                request = self._http.build_request(method, path, **options)
                return self._http.send(request, stream=stream)
            case _flow.Body(response, "all"):
                return response.read()
            case _flow.Body(response, "lines"):
                return response.iter_lines()
            case _flow.Body(response, "bytes"):
                return response.iter_bytes()
            case _flow.Body(response, "close"):
                return response.close()
            case _flow.Next(source):
                return next(source, None)
            case _flow.Sleep(seconds):
                return time.sleep(seconds)
        raise TypeError(f"{op!r} is not an op this client runs")

"""Calls written once, run by either client: a call is a *flow*, a generator that
yields the I/O it needs (an :data:`Op`) and is sent each answer back.

A flow decides everything (URLs, headers, bodies, retries, when to poll, what an answer
means); the sync :class:`~atelier_client.Client` answers its ops with ``httpx.Client``
and ``time.sleep``, the :class:`~atelier_client.AsyncClient` with ``httpx.AsyncClient``
and ``asyncio.sleep``. An op that fails (a broken connection) is thrown into the flow
where it waits, so a flow's ``try``/``except`` sees it as a plain call would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, overload

import httpx


@dataclass(frozen=True)
class Send:
    """One request, answered with its response (its body read, unless ``stream``)."""

    method: str
    path: str
    options: dict[str, Any] = field(default_factory=dict)
    stream: bool = False


@dataclass(frozen=True)
class Next:
    """The next item of a Body iterator, or ``None`` at its end."""

    source: Any


@dataclass(frozen=True)
class Body:
    """A streamed response's body: ``"all"`` reads it whole (a failed answer's error),
    ``"lines"`` and ``"bytes"`` answer an iterator for Next, ``"close"`` closes it."""

    response: httpx.Response
    part: Literal["all", "lines", "bytes", "close"]


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds``."""

    seconds: float


@dataclass(frozen=True)
class Emit:
    """Hand ``value`` to whoever iterates the call (a streamed call only)."""

    value: Any


Op = Send | Next | Body | Sleep | Emit
T = TypeVar("T")
P = ParamSpec("P")
#: A call: yields ops, is sent their answers, returns its result.
Flow = Generator[Op, Any, T]


class Course(Generic[T]):
    """One flow on its way: :attr:`op` is the op it waits on (``None`` once it has
    returned :attr:`result`); the streams it opened are kept to be closed at the end."""

    def __init__(self, flow: Flow[T]) -> None:
        self._flow = flow
        self.op: Op | None = None
        self.result: T
        self.opened: list[httpx.Response] = []
        self._step(lambda: next(flow))

    def take(self) -> Any:
        """The value an :class:`Emit` hands out (the flow goes on)."""
        assert isinstance(self.op, Emit)
        value = self.op.value
        self.answer(None)
        return value

    def answer(self, value: Any) -> None:
        """Send the answer of :attr:`op`."""
        if isinstance(self.op, Send) and self.op.stream:
            self.opened.append(value)
        self._step(lambda: self._flow.send(value))

    def fail(self, error: BaseException) -> None:
        """Throw the error :attr:`op` raised into the flow."""
        self._step(lambda: self._flow.throw(error))

    def _step(self, move: Callable[[], Op]) -> None:
        try:
            self.op = move()
        except StopIteration as stop:
            self.op = None
            self.result = stop.value


class Runner:
    """What a client is to a flow: it runs one to its result (sync: the result; async:
    an awaitable of it)."""

    def _run(self, flow: Flow[T]) -> Any:
        raise NotImplementedError


class SyncRunner(Runner):
    """Runs flows with blocking I/O: a call returns its result."""


class AsyncRunner(Runner):
    """Runs flows with asyncio: a call returns a coroutine of its result."""


class call(Generic[P, T]):  # noqa: N801 - used as a decorator-like descriptor
    """A flow as a client's method: ``Client().x(...)`` returns the result and
    ``AsyncClient().x(...)`` a coroutine of it, with the flow's signature and docstring."""

    def __init__(self, flow: Callable[Concatenate[Any, P], Flow[T]]) -> None:
        self.flow = flow
        self.__doc__ = flow.__doc__

    @overload
    def __get__(self, client: None, owner: type | None = None) -> call[P, T]: ...
    @overload
    def __get__(self, client: SyncRunner, owner: type | None = None) -> Callable[P, T]: ...
    @overload
    def __get__(
        self, client: AsyncRunner, owner: type | None = None
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, client: Runner | None, owner: type | None = None) -> Any:
        if client is None:
            return self
        flow = self.flow

        @functools.wraps(flow)
        def bound(*args: P.args, **kwargs: P.kwargs) -> Any:
            return client._run(flow(client, *args, **kwargs))

        return bound

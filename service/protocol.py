"""uvicorn's HTTP/1.1 protocol: deadlines on the request head and on late bodies, a cap
on the head's size, and event streams kept out of the connection cap.

uvicorn times out idle keep-alive connections (``timeout_keep_alive``) but has no
timeout for a request whose line and headers arrive slowly: measured with uvicorn
0.54 (``tests/service/test_slow_clients.py`` run against the code before this
module), a connection that sent nothing, one that sent half a head, and a keep-alive
connection that began a second head were all still open when the test gave up after
30 s. ``HeadTimeoutProtocol`` closes a connection whose request head is not complete ``header_timeout_s`` after the
connection opened, or after the first byte of a later request on a keep-alive
connection (the idle wait before that byte is ``timeout_keep_alive``'s job). The
answer is a bare ``408`` and the connection is closed.

Bodies are the app's business (the body deadline in ``service.app``), except after
an answer sent before the body ended (a 401, 408, 413 or a refused upload): uvicorn
then reads and drops the rest of the body for as long as the client sends it, so a
client trickling a byte at a time keeps the connection forever. Here it gets
``timeout_keep_alive`` seconds to finish, as an idle connection would, then the
connection is closed. (Closing at once would often reset the connection before the
client has read the answer.)

Head size: h11 refuses a head over 16 KiB only while it arrives in pieces; a complete
head that large in one read was accepted. Here the head's bytes are counted as they
arrive, wherever it ends, and a head over ``MAX_HEAD_BYTES`` gets a bare ``431`` and the
connection is closed before h11 parses it.

Event streams: uvicorn's ``limit_concurrency`` (``max_connections``) counts every open
connection and request, so a client holding a hundred ``/v1/jobs/{id}/events`` streams
locked everyone else out. A request may call
``scope["state"]["exempt_from_connection_cap"]()`` (the event stream route does): its
connection and task then count no more, and once its answer ends the connection is
closed (a job's streams end together: counted again, they would fill the cap for the
moment their clients take to close them). Streams have their own bounds
(``max_event_streams``, ``key_max_event_streams``).

Zero-copy send: every request's scope offers ASGI's zero-copy send extension
(:data:`ZERO_COPY_SEND`). A route that answers with bytes of a file (a job's result on
the blob volume, or a job's JSON with its result inline, held in an in-memory file by
:class:`SendableBytes`: :class:`FileSpanResponse`) sends ``{"type":
"http.response.zerocopysend", "file": f, "offset": o, "count": n, "more_body": False}``,
and the bytes go from the page cache to the socket by ``sendfile(2)`` (``loop.sendfile``,
which copies through Python where the transport cannot, e.g. TLS). uvloop's loop has no
``sendfile``: there the extension is not offered and routes stream their bytes. h11 is
told of the bytes with a placeholder of their length (``send_with_data_passthrough``, as
h11's documentation describes for sendfile), so its framing and keep-alive stay right.
``benchmarks/result_send.py`` measures the server's CPU per GB sent both ways (4.5x less
by ``sendfile``: ``docs/service.md``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import IO, Any
from weakref import WeakKeyDictionary, finalize

import h11
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle
from uvicorn.server import ServerState

from service.errors import HeaderTimeout, HeaderTooLarge, ServiceError


def _bare_response(error: ServiceError) -> bytes:
    """The whole answer to ``error`` as bytes, for a connection the app never saw."""
    payload = json.dumps(error.body()).encode()
    status = f"{error.status_code} {HTTPStatus(error.status_code).phrase}"
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n"
        f"content-length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


_HEAD_TIMEOUT_RESPONSE = _bare_response(HeaderTimeout("the request headers came too slowly"))
#: The largest request head (request line and headers) accepted, in bytes.
MAX_HEAD_BYTES = 16 * 1024
_HEAD_TOO_LARGE_RESPONSE = _bare_response(
    HeaderTooLarge(f"the request head is over {MAX_HEAD_BYTES} bytes")
)
_HEAD_END = b"\r\n\r\n"
#: ASGI's zero-copy send extension, in every request's ``scope["extensions"]``.
ZERO_COPY_SEND = "http.response.zerocopysend"


@dataclass(frozen=True)
class _FileSpan:
    """``count`` bytes of ``file`` from ``offset``: what h11 is handed in place of the
    bytes (it needs their length only) and what is then sent by ``sendfile``."""

    file: IO[bytes]
    offset: int
    count: int

    def __len__(self) -> int:
        return self.count


@dataclass
class _Exempt:
    """The connections and tasks of one server that count no more (event streams)."""

    connections: set[Any] = field(default_factory=set)
    tasks: set[Any] = field(default_factory=set)


#: per uvicorn server (its ``ServerState``): what is exempted from its connection cap
_EXEMPT: WeakKeyDictionary[ServerState, _Exempt] = WeakKeyDictionary()


class _Uncounted:
    """One of uvicorn's shared sets (connections or tasks) whose ``len()`` leaves out the
    members exempted from the connection cap; everything else passes through."""

    def __init__(self, members: set[Any], exempt: set[Any]) -> None:
        self.members = members
        self.exempt = exempt

    def add(self, item: Any) -> None:
        self.members.add(item)

    def discard(self, item: Any) -> None:
        self.members.discard(item)
        self.exempt.discard(item)

    def __len__(self) -> int:
        return len(self.members) - sum(1 for item in self.exempt if item in self.members)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.members)

    def __contains__(self, item: Any) -> bool:
        return item in self.members


def offers_zero_copy_send(scope: Scope) -> bool:
    """Whether the server that ``scope`` came from takes :data:`ZERO_COPY_SEND` (this
    module's protocol does; a test client does not)."""
    return ZERO_COPY_SEND in scope.get("extensions", {})


class FileSpanResponse(Response):
    """``count`` bytes of an open ``file`` from ``offset``, sent with :data:`ZERO_COPY_SEND`
    between ``prefix`` and ``suffix``, which are sent as they are (the ``Content-Length``
    is their sum); the file is closed once they are sent."""

    def __init__(
        self,
        file: IO[bytes],
        offset: int,
        count: int,
        *,
        status_code: int,
        media_type: str,
        headers: dict[str, str],
        prefix: bytes = b"",
        suffix: bytes = b"",
    ) -> None:
        headers = {**headers, "Content-Length": str(len(prefix) + count + len(suffix))}
        super().__init__(status_code=status_code, media_type=media_type, headers=headers)
        self.file, self.offset, self.count = file, offset, count
        self.prefix, self.suffix = prefix, suffix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            start = {"type": "http.response.start", "status": self.status_code}
            await send({**start, "headers": self.raw_headers})
            if self.prefix:
                await send({"type": "http.response.body", "body": self.prefix, "more_body": True})
            span = {"file": self.file, "offset": self.offset, "count": self.count}
            await send({"type": ZERO_COPY_SEND, **span, "more_body": bool(self.suffix)})
            if self.suffix:
                await send({"type": "http.response.body", "body": self.suffix, "more_body": False})
        finally:
            self.file.close()


class SendableBytes:
    """Bytes that many answers send, held in an anonymous in-memory file (Linux's
    ``memfd_create``), so that each answer sends them by ``sendfile(2)``
    (:class:`FileSpanResponse`) instead of copying them through the event loop a piece at
    a time. Fewer than ``IN_FILE_FROM`` bytes (one write sends them), or where there is
    no such file, they are kept as bytes: a cache of many small ones holds no descriptors.

    ``open()`` gives an answer a file of its own (the in-memory file opened again, with a
    position of its own, closed by the answer), so the bytes outlive this object for as
    long as a send needs them; the descriptor held here is closed when this object is
    collected.
    """

    #: The size from which the bytes are held in a file.
    IN_FILE_FROM = 256 * 1024

    def __init__(self, data: bytes) -> None:
        self._size = len(data)
        self._fd: int | None = None
        self._data: bytes | None = data
        memfd_create = getattr(os, "memfd_create", None)
        if memfd_create is None or self._size < self.IN_FILE_FROM:
            return
        try:
            fd = memfd_create("atelier-answer", os.MFD_CLOEXEC)
        except OSError:  # out of descriptors or memory: kept as bytes
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError:
            os.close(fd)
            return
        self._fd, self._data = fd, None
        finalize(self, os.close, fd)

    def __len__(self) -> int:
        return self._size

    def content(self) -> bytes:
        """The bytes themselves (a copy read from the file, where they are in one)."""
        if self._data is not None:
            return self._data
        assert self._fd is not None
        pieces, offset = [], 0
        while offset < self._size:
            piece = os.pread(self._fd, self._size - offset, offset)
            if not piece:
                raise OSError(f"the in-memory file ended at {offset} of {self._size} bytes")
            pieces.append(piece)
            offset += len(piece)
        return b"".join(pieces)

    def open(self) -> IO[bytes] | None:
        """A file of the bytes for one answer to send and close; None where they are
        kept as bytes (or no descriptor is left: then the answer sends ``content()``)."""
        if self._fd is None:
            return None
        try:  # not a duplicate: that would share one position among concurrent sends
            return os.fdopen(os.open(f"/proc/self/fd/{self._fd}", os.O_RDONLY), "rb")
        except OSError:
            return None


class HeadTimeoutProtocol(H11Protocol):
    """``H11Protocol`` plus a deadline for each request's head and for a body that is
    still arriving after its answer.

    Args:
        header_timeout_s: seconds a request head may take to arrive.
        Everything else: as ``H11Protocol`` (uvicorn passes ``config``, ``server_state``...).
    """

    def __init__(self, *args: Any, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s = header_timeout_s
        self._head_timer: asyncio.TimerHandle | None = None
        self._late_body_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._head_tail = b""
        self._exempt = _EXEMPT.setdefault(self.server_state, _Exempt())
        # uvicorn reads len() of these to apply limit_concurrency; the views leave out
        # the exempted streams (same members, same add/discard)
        self._all_tasks = self.server_state.tasks
        self.connections = _Uncounted(  # type: ignore[assignment]
            self.server_state.connections, self._exempt.connections
        )
        self.tasks = _Uncounted(self._all_tasks, self._exempt.tasks)  # type: ignore[assignment]

    def _leave_cap(self, task: asyncio.Task[None]) -> None:
        """Called by the app: this request (an event stream) leaves the connection cap."""
        self._exempt.connections.add(self)
        self._exempt.tasks.add(task)
        task.add_done_callback(self._exempt.tasks.discard)

    def handle_events(self) -> None:
        starting = self.conn.their_state is h11.IDLE  # a new request may begin here
        before = set(self._all_tasks) if starting else None
        cycle = self.cycle
        super().handle_events()
        # asyncio's own loops send files (uvloop's has no ``sendfile``: no offer there)
        offer = isinstance(self.loop, asyncio.BaseEventLoop)
        if offer and self.cycle is not None and self.cycle is not cycle:
            self._offer_zero_copy_send(self.cycle)
        if before is None:
            return
        started = self._all_tasks - before  # the task uvicorn made for the request
        scope = getattr(self, "scope", None)
        if len(started) == 1 and scope is not None:
            (task,) = started
            scope["state"]["exempt_from_connection_cap"] = lambda: self._leave_cap(task)

    def _offer_zero_copy_send(self, cycle: RequestResponseCycle) -> None:
        """Add :data:`ZERO_COPY_SEND` to the new request's scope and its ``send`` (uvicorn
        hands the app ``cycle.send`` when the request's task starts, after this)."""
        cycle.scope.setdefault("extensions", {})[ZERO_COPY_SEND] = {}
        plain_send = cycle.send

        async def send(message: Any) -> None:
            if message["type"] != ZERO_COPY_SEND:
                await plain_send(message)
                return
            span = _FileSpan(message["file"], message.get("offset") or 0, message["count"])
            if await self._send_file_span(cycle, span):
                more_body = bool(message.get("more_body", False))
                await plain_send(
                    {"type": "http.response.body", "body": b"", "more_body": more_body}
                )

        cycle.send = send  # type: ignore[method-assign]

    async def _send_file_span(self, cycle: RequestResponseCycle, span: _FileSpan) -> bool:
        """Send ``span`` as body bytes of ``cycle``'s answer; False when the client has
        gone (before or while it was sent)."""
        if cycle.flow.write_paused and not cycle.disconnected:
            await cycle.flow.drain()
        if cycle.disconnected:
            return False
        if not cycle.response_started or cycle.response_complete:
            raise RuntimeError(f"{ZERO_COPY_SEND} is a body message: send the answer's start first")
        if cycle.scope["method"] == "HEAD" or span.count == 0:
            return True
        data = h11.Data(data=span)  # type: ignore[arg-type]  # h11 reads its length only
        # the span comes back in its place among the pieces (a chunked answer's framing)
        pieces: Sequence[object] = cycle.conn.send_with_data_passthrough(data) or ()
        try:
            for piece in pieces:
                if isinstance(piece, _FileSpan):
                    await self.loop.sendfile(self.transport, span.file, span.offset, span.count)
                elif isinstance(piece, bytes):
                    self.transport.write(piece)
        except (OSError, RuntimeError):  # the client went, or the transport is closing
            cycle.disconnected = True
            self.transport.close()
            return False
        return True

    def _head_too_large(self, data: bytes) -> bool:
        """Count the head's bytes in ``data`` (the head ends at its blank line)."""
        window = self._head_tail + data
        end = window.find(_HEAD_END)
        if end != -1:
            size = self._head_bytes - len(self._head_tail) + end + len(_HEAD_END)
            self._head_bytes, self._head_tail = 0, b""
            return size > MAX_HEAD_BYTES
        self._head_bytes += len(data)
        self._head_tail = window[-(len(_HEAD_END) - 1) :]
        return self._head_bytes > MAX_HEAD_BYTES

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_head_timer()  # the first byte of a later request on this connection
        if self.conn.their_state is h11.IDLE and self._head_too_large(data):
            self.logger.info("closing a connection whose request head is too large")
            self._disarm_head_timer()
            self.transport.write(_HEAD_TOO_LARGE_RESPONSE)
            self.transport.close()
            return
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_head_timer()  # the head is complete: the request is the app's now

    def on_response_complete(self) -> None:
        if self in self._exempt.connections:
            # An event stream has ended: its connection closes, still uncounted, so the
            # streams of a job that ends together never come back into the cap at once.
            self.server_state.total_requests += 1
            self.transport.close()
            return
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.SEND_BODY:
            self._late_body_timer = self.loop.call_later(self.timeout_keep_alive, self._late_body)

    def connection_lost(self, exc: Exception | None) -> None:
        self._exempt.connections.discard(self)
        self._disarm_head_timer()
        if self._late_body_timer is not None:
            self._late_body_timer.cancel()
        super().connection_lost(exc)

    def _late_body(self) -> None:
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self.logger.info("closing a connection whose body went on after its answer")
            self.transport.close()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.logger.info("closing a connection whose request head came too slowly")
            self.transport.write(_HEAD_TIMEOUT_RESPONSE)
            self.transport.close()

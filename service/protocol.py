"""uvicorn's HTTP/1.1 protocol with a deadline on the request head and on late bodies.

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
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.errors import error_body


def _bare_response(status: str, body: dict) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n"
        f"content-length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


_HEAD_TIMEOUT_RESPONSE = _bare_response(
    "408 Request Timeout", error_body("header_timeout", "the request headers came too slowly")
)


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

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_head_timer()  # the first byte of a later request on this connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_head_timer()  # the head is complete: the request is the app's now

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.SEND_BODY:
            self._late_body_timer = self.loop.call_later(self.timeout_keep_alive, self._late_body)

    def connection_lost(self, exc: Exception | None) -> None:
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

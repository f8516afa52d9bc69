"""ASGI's zero-copy send in ``service.protocol``: a file's bytes sent by ``sendfile``.

A small app runs on a real uvicorn with the service's protocol, in a thread of this
process (so ``loop.sendfile`` can be watched); the job result route is checked against a
real ``atelier serve`` with a result on the blob volume.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import io
import json
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn
from fastapi.testclient import TestClient
from live_server import free_port, live_server
from PIL import Image
from service_fakes import wait_until
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from service.config import Settings
from service.jobs.blobs import FILE_MIN_BYTES
from service.jobs.records import JobRecord, JobResult, new_job_id
from service.protocol import (
    ZERO_COPY_SEND,
    FileSpanResponse,
    HeadTimeoutProtocol,
    SendableBytes,
    offers_zero_copy_send,
)

pytestmark = pytest.mark.timeout(120)

FILE_BYTES = 3 * 2**20 + 12345


class SpanApp:
    """``/span?offset=&count=``: the span of ``path`` as a :class:`FileSpanResponse`;
        ``/framed?offset=&count=&prefix=&suffix=``: the span between two strings' bytes;
    ``/chunked``: the same sent raw with no ``Content-Length`` (a chunked answer);
        ``/offered``: whether the scope offers the extension. Every file it opened is kept in
        ``opened``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.opened: list[io.BufferedReader] = []
        self.app = Starlette(
            routes=[
                Route("/span", self.span, methods=["GET", "HEAD"]),
                Route("/framed", self.framed),
                Route("/chunked", self.chunked),
                Route("/offered", self.offered),
            ]
        )

    def _open(self) -> io.BufferedReader:
        file = open(self.path, "rb")  # noqa: SIM115 - the response closes it
        self.opened.append(file)
        return file

    async def span(self, request: Request) -> Response:
        offset, count = int(request.query_params["offset"]), int(request.query_params["count"])
        return FileSpanResponse(
            self._open(), offset, count, status_code=200, media_type="image/png", headers={}
        )

    async def framed(self, request: Request) -> Response:
        query = request.query_params
        return FileSpanResponse(
            self._open(),
            int(query["offset"]),
            int(query["count"]),
            status_code=200,
            media_type="application/octet-stream",
            headers={},
            prefix=query["prefix"].encode(),
            suffix=query["suffix"].encode(),
        )

    async def chunked(self, request: Request) -> Response:
        file, count = self._open(), int(request.query_params["count"])

        class Raw(Response):
            async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
                await send({"type": "http.response.start", "status": 200, "headers": []})
                await send({"type": ZERO_COPY_SEND, "file": file, "count": count})
                file.close()

        return Raw()

    async def offered(self, request: Request) -> Response:
        return JSONResponse({"offered": offers_zero_copy_send(request.scope)})


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, bytes]:
    path = tmp_path_factory.mktemp("span") / "blob.bin"
    content = os.urandom(FILE_BYTES)
    path.write_bytes(content)
    return path, content


@pytest.fixture
def sendfiles(monkeypatch) -> list[int]:
    """The byte counts ``loop.sendfile`` was asked to send, in this process."""
    counts: list[int] = []
    real = asyncio.BaseEventLoop.sendfile

    async def watched(self, transport, file, offset=0, count=None, *, fallback=True):
        counts.append(count)
        return await real(self, transport, file, offset, count, fallback=fallback)

    monkeypatch.setattr(asyncio.BaseEventLoop, "sendfile", watched)
    return counts


@contextmanager
def served_app(app: ASGIApp) -> Iterator[str]:
    """``app`` on a real uvicorn with the service's protocol, in a thread of this
    process: its URL."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=free_port(),
        http=partial(HeadTimeoutProtocol, header_timeout_s=10.0),  # type: ignore[arg-type]
        loop="asyncio",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started)
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def served(data):
    """(the app, its URL) on a real uvicorn with the service's protocol."""
    app = SpanApp(data[0])
    with served_app(app.app) as url:
        yield app, url


SPANS = [(0, FILE_BYTES), (0, 1), (FILE_BYTES - 1, 1), (12345, 2**20), (777, 0)]


def test_spans_are_sent_by_sendfile_with_their_bytes_on_one_connection(served, data, sendfiles):
    app, url = served
    content = data[1]
    with httpx.Client(base_url=url, timeout=30) as client:
        answers = [client.get("/span", params={"offset": o, "count": n}) for o, n in SPANS]
        assert client.get("/offered").json() == {"offered": True}
    for (offset, count), answer in zip(SPANS, answers, strict=True):
        assert answer.status_code == 200
        assert answer.headers["content-length"] == str(count)
        assert answer.content == content[offset : offset + count]
    assert sendfiles == [count for _, count in SPANS if count]  # an empty span sends none
    assert all(file.closed for file in app.opened)


def test_a_span_without_a_length_is_framed_as_chunks(served, data, sendfiles):
    _, url = served
    answer = httpx.get(f"{url}/chunked", params={"count": 2**20 + 3}, timeout=30)
    assert answer.headers["transfer-encoding"] == "chunked"
    assert answer.content == data[1][: 2**20 + 3]
    assert sendfiles == [2**20 + 3]


def test_head_sends_no_body_and_the_connection_goes_on(served, data, sendfiles):
    _, url = served
    with httpx.Client(base_url=url, timeout=30) as client:
        head = client.head("/span", params={"offset": 0, "count": 1000})
        get = client.get("/span", params={"offset": 5, "count": 10})
    assert head.headers["content-length"] == "1000" and head.content == b""
    assert get.content == data[1][5:15]
    assert sendfiles == [10]


def test_a_client_that_leaves_mid_span_leaves_the_server_well(served, data):
    app, url = served
    port = int(url.rsplit(":", 1)[1])
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            query = f"offset=0&count={FILE_BYTES}"
            sock.sendall(f"GET /span?{query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert b"200 OK" in sock.recv(4096)
        # closed with most of the span unsent
    wait_until(lambda: len(app.opened) == 3 and all(file.closed for file in app.opened))
    answer = httpx.get(f"{url}/span", params={"offset": 1, "count": 99}, timeout=30)
    assert answer.content == data[1][1:100]


def test_a_test_client_is_not_offered_the_extension(data):
    with TestClient(SpanApp(data[0]).app) as client:
        assert client.get("/offered").json() == {"offered": False}


# ------------------------------------------------------------------ the result route
def _noise_png(side: int) -> bytes:
    rng = np.random.default_rng(side)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (side, side, 3), np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def _seed_succeeded_job(state_dir: Path, image: bytes) -> str:
    """A job that succeeded with ``image``, in the store a server on ``state_dir`` opens."""
    from service.app import open_store

    async def seed() -> str:
        store = open_store(Settings(state_dir=state_dir, _env_file=None))
        await store.start()
        try:
            record = JobRecord(id=new_job_id(), kind="stylize", model="adain", owner="anonymous")
            await store.create(record, b"input", owner_max_jobs=10)
            assert await store.claim("w", "adain", ("background",), 30.0) is not None
            result = JobResult([image], "image/png", {}).packed()
            assert await store.finish(record.id, "succeeded", result=result)
        finally:
            await store.close()
        return record.id

    return asyncio.run(seed())


def test_a_result_on_the_blob_volume_downloads_whole_and_in_ranges(tmp_path):
    """Through a real server (which sends a result on the volume by ``sendfile``): the
    whole image, ranges of it, and a download left halfway leave the next one right."""
    image = _noise_png(400)
    assert len(image) > FILE_MIN_BYTES  # kept on the volume, not in the database
    job = _seed_succeeded_job(tmp_path, image)
    with (
        live_server({"state_dir": str(tmp_path)}) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        url = client.get(f"/v1/jobs/{job}").json()["result_url"]
        whole = client.get(url)
        middle = client.get(url, headers={"Range": "bytes=1000-200999"})
        tail = client.get(url, headers={"Range": "bytes=-7"})
        with client.stream("GET", url) as left:
            next(left.iter_raw(1024))
        again = client.get(url)
    assert whole.status_code == 200 and whole.content == image
    assert whole.headers["content-type"] == "image/png"
    assert middle.status_code == 206 and middle.content == image[1000:201000]
    assert middle.headers["content-range"] == f"bytes 1000-200999/{len(image)}"
    assert tail.status_code == 206 and tail.content == image[-7:]
    assert again.content == image


def test_the_route_streams_where_the_server_has_no_zero_copy_send(tmp_path):
    """The test client offers no extension: the same bytes come in chunks."""
    from service.app import create_app

    image = _noise_png(400)
    job = _seed_succeeded_job(tmp_path, image)
    settings = Settings(state_dir=tmp_path, load_models="", devices="cpu", _env_file=None)
    with TestClient(create_app(settings)) as client:
        whole = client.get(f"/v1/jobs/{job}/result")
        part = client.get(f"/v1/jobs/{job}/result", headers={"Range": "bytes=10-19"})
    assert whole.content == image and part.content == image[10:20]


# --------------------------------------------------------- bytes many answers send
def test_sendable_bytes_are_held_in_a_file_that_outlives_them():
    data = os.urandom(SendableBytes.IN_FILE_FROM + 777)
    held = SendableBytes(data)
    file = held.open()
    assert file is not None and len(held) == len(data)
    assert held.content() == data
    other = held.open()  # a position of its own: concurrent answers never share one
    assert other is not None
    with other:
        assert other.read(10) == data[:10]
    del held
    gc.collect()  # the held descriptor is closed; the answer's own one still reads
    with file:
        assert file.read() == data


def test_small_sendable_bytes_are_kept_as_bytes():
    data = os.urandom(SendableBytes.IN_FILE_FROM - 1)
    held = SendableBytes(data)
    assert held.open() is None and held.content() is data and len(held) == len(data)


@pytest.mark.parametrize(
    ("prefix", "offset", "count", "suffix"),
    [('{"head": 1, "result": ', 0, FILE_BYTES, "}"), ("<", 12345, 2**20, ""), ("", 5, 10, ">"),
     ("<", 777, 0, ">")],
)  # fmt: skip
def test_a_span_between_bytes_is_sent_whole(served, data, sendfiles, prefix, offset, count, suffix):
    app, url = served
    with httpx.Client(base_url=url, timeout=30) as client:
        params = {"offset": offset, "count": count, "prefix": prefix, "suffix": suffix}
        answer = client.get("/framed", params=params)
        after = client.get("/span", params={"offset": 0, "count": 3})  # the same connection
    assert answer.headers["content-length"] == str(len(prefix) + count + len(suffix))
    assert answer.content == prefix.encode() + data[1][offset : offset + count] + suffix.encode()
    assert after.content == data[1][:3]
    assert sendfiles == [n for n in (count, 3) if n]
    wait_until(lambda: all(file.closed for file in app.opened))  # once its last send returned


def _job_json_over(app_url: str, job: str) -> bytes:
    return httpx.get(f"{app_url}/v1/jobs/{job}", timeout=30).content


def test_a_large_job_json_is_sent_by_sendfile_with_the_bytes_of_the_streamed_one(
    tmp_path, sendfiles
):
    """The job's JSON with a result inline above the in-file size: sent from the cache's
    in-memory file on the service's protocol, streamed by the test client; the same bytes."""
    from service.app import create_app

    image = _noise_png(400)
    job = _seed_succeeded_job(tmp_path, image)
    settings = Settings(state_dir=tmp_path, load_models="", devices="cpu", _env_file=None)
    with TestClient(create_app(settings)) as client:
        streamed = client.get(f"/v1/jobs/{job}").content
    with served_app(create_app(settings)) as url:
        sent = [_job_json_over(url, job) for _ in range(2)]  # built once, then from the cache
    body = json.loads(streamed)
    assert base64.b64decode(body["result"]["images"][0]) == image
    assert sent == [streamed, streamed]
    assert len(sendfiles) == 2 and sendfiles[0] > SendableBytes.IN_FILE_FROM

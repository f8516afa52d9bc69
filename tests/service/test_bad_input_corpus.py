"""The bad-input corpus: every kind gets its documented status, and the server stays healthy.

Documented statuses (see ``service.errors``): 400 for an upload that is not a usable
image, 413 for too many bytes or pixels, 415 for a non-image or unsupported format,
422 for fields of the wrong type, out of range or of the wrong count. Never a 500.
"""

from __future__ import annotations

import asyncio
import io

import corpus
import pytest
from PIL import Image
from service_fakes import make_settings

from service.app import create_app


def _assert_healthy(client) -> None:
    assert client.get("/healthz").status_code == 200
    good = client.post(
        "/v1/stylize",
        files=[("content", ("c.png", corpus.png(), "image/png")), ("style", corpus.png(seed=1))],
    )
    assert good.status_code == 200


@pytest.mark.parametrize("case", corpus.STYLIZE_CASES, ids=lambda case: case.name)
def test_stylize_corpus(client, case):
    response = client.post("/v1/stylize", files=case.multipart(), data=case.fields)
    assert response.status_code == case.status, response.text
    if case.status == 200:
        image = Image.open(io.BytesIO(response.content))
        image.load()
        if case.name == "exif_rotated":
            assert image.size == (24, 48)  # portrait, as the EXIF tag says
    else:
        error = response.json()["error"]
        assert set(error) == {"code", "message"} and error["message"]
        assert len(error["message"]) <= 300  # echoed input is capped
        assert "PIL" not in error["message"] and "Pillow" not in error["message"]
        if case.code is not None:
            assert error["code"] == case.code
    _assert_healthy(client)


@pytest.mark.parametrize("case", corpus.GENERATE_CASES, ids=lambda case: case.name)
def test_generate_corpus(client, case):
    if isinstance(case.body, str):
        response = client.post(
            "/v1/generate", content=case.body, headers={"Content-Type": "application/json"}
        )
    else:
        response = client.post("/v1/generate", json=case.body)
    assert response.status_code == case.status, response.text
    assert response.json()["error"]["code"] == "validation_error"
    if case.message is not None:
        assert case.message in response.json()["error"]["message"]
    assert client.post("/v1/generate", json={"prompt": "fine"}).status_code == 200


def test_declared_oversize_body_is_refused_before_reading(client_factory):
    client = client_factory(max_stylize_upload_bytes=64 * 1024)
    big = corpus.png(256, 256)  # ~200 kB of noise
    response = client.post("/v1/stylize", files=[("content", big), ("style", corpus.png())])
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    _assert_healthy_small(client)


def _multipart_head(boundary: str) -> bytes:
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="content"; '
        'filename="big.png"\r\nContent-Type: image/png\r\n\r\n'
    ).encode()


def test_chunked_oversize_body_answers_413(client_factory):
    client = client_factory(max_stylize_upload_bytes=64 * 1024)

    def body():  # a generator: sent chunked, without Content-Length
        yield _multipart_head("b0undary")
        for _ in range(20):
            yield b"\x00" * 8192

    response = client.post(
        "/v1/stylize",
        content=body(),
        headers={"Content-Type": "multipart/form-data; boundary=b0undary"},
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    _assert_healthy_small(client)


def test_upload_cap_stops_reading_the_body_early():
    """At the ASGI level: count the body messages the app pulls before it answers 413."""
    cap, chunk, offered = 64 * 1024, 8192, 200
    app = create_app(make_settings(max_stylize_upload_bytes=cap), model_entries={})
    messages = [_multipart_head("b0undary")] + [b"\x00" * chunk] * offered
    pulled = 0
    sent = []

    async def receive():
        nonlocal pulled
        if pulled < len(messages):
            pulled += 1
            return {"type": "http.request", "body": messages[pulled - 1], "more_body": True}
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/stylize",
        "raw_path": b"/v1/stylize",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"multipart/form-data; boundary=b0undary")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }
    asyncio.run(app(scope, receive, send))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 413
    assert pulled * chunk <= cap + 2 * chunk  # stopped at the cap, not after 1.6 MB


def _assert_healthy_small(client) -> None:
    assert client.get("/healthz").status_code == 200
    small = client.post("/v1/stylize", files=[("content", corpus.png()), ("style", corpus.png())])
    assert small.status_code == 200

"""Faults a careless or hostile client can cause, in-process (fake models).

The slow-client and drain cases need a real uvicorn: ``test_slow_clients.py``.
"""

from __future__ import annotations

import hashlib
import io
import threading
import tracemalloc

import corpus
import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image
from service_fakes import FakeStyleTransfer, make_settings

import models.images as model_images
from service.app import create_app
from service.workers.registry import ModelEntry
from service.workers.style_transfer import run_stylize

KEY = {"Authorization": "Bearer s3cret"}


def _stylize(client, content: bytes, style: bytes, **fields):
    files = [("content", ("c.png", content, "image/png")), ("style", ("s.png", style, "image/png"))]
    return client.post("/v1/stylize", files=files, data=fields)


# ------------------------------------------------------------------ API key first
def test_api_key_is_checked_before_a_json_body_is_parsed(client_factory):
    client = client_factory(api_key="s3cret")
    response = client.post(
        "/v1/generate", content=b"not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"


def test_api_key_is_checked_before_a_multipart_body_is_parsed(client_factory):
    client = client_factory(api_key="s3cret")
    files = [("style", ("s.png", b"x", "image/png"))] * 1001
    assert client.post("/v1/stylize", files=files).status_code == 401
    wrong = client.post("/v1/stylize", files=files, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


@pytest.mark.parametrize("path", ["/metrics", "/docs", "/openapi.json", "/redoc"])
def test_metrics_and_docs_need_the_key_when_one_is_set(client_factory, path):
    client = client_factory(api_key="s3cret")
    assert client.get(path).status_code == 401
    assert client.get(path, headers=KEY).status_code == 200
    assert client.get("/healthz").status_code == 200  # probes stay open
    assert client.get("/readyz").status_code == 200


def test_metrics_and_docs_can_stay_open(client_factory):
    client = client_factory(api_key="s3cret", protect_metrics_and_docs=False)
    assert client.get("/metrics").status_code == 200
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/v1/models").status_code == 401


# ------------------------------------------------------------- no host paths
def test_models_name_weight_files_and_hash_them_without_host_paths(fakes, tmp_path):
    weights = tmp_path / "weights"
    (weights / "vgg").mkdir(parents=True)
    checkpoint = weights / "vgg" / "encoder.pth"
    checkpoint.write_bytes(b"not really a checkpoint")

    class Described(FakeStyleTransfer):
        def describe(self):
            return {"name": "adain", "weight_files": [str(checkpoint)], "device": self.device}

    def missing(search_path, device):
        raise FileNotFoundError(f"decoder.pth not found in {weights}/decoders")

    entries = fakes.entries() | {
        "adain": ModelEntry("adain", lambda path, device: Described(device), run_stylize),
        "dit": ModelEntry("dit", missing, run_stylize),
    }
    app = create_app(make_settings(weights_dir=weights), model_entries=entries)
    with TestClient(app) as client:
        response = client.get("/v1/models")
    assert str(tmp_path) not in response.text
    models = {m["name"]: m for m in response.json()["models"]}
    details = models["adain"]["details"]
    assert details["weight_files"] == ["vgg/encoder.pth"]
    assert details["sha256"] == {
        "vgg/encoder.pth": hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    }
    assert models["dit"]["error"] == "FileNotFoundError: decoder.pth not found in decoders"


# ----------------------------------------------------------------- HTTP details
def test_no_redirect_is_built_from_the_host_header(client):
    response = client.get("/healthz/", headers={"Host": "evil.example.com"}, follow_redirects=False)
    assert response.status_code == 404
    assert "location" not in response.headers


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probes_answer_head(client, path):
    response = client.head(path)
    assert response.status_code == 200
    assert response.content == b""


def test_validation_messages_do_not_echo_huge_input(client):
    body = {"prompt": "a cat", "x" * 40_000: 1} | {f"extra{i}": i for i in range(1000)}
    response = client.post("/v1/generate", json=body)
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert len(message) < 1000 and "more" in message


# ------------------------------------------------------------ stylize fields
def test_huge_style_weights_are_normalised_not_overflowed(client):
    content, style = corpus.png(), corpus.solid_png((200, 40, 40), 32, 32)
    files = [("content", ("c.png", content, "image/png"))] + [
        ("style", ("s.png", style, "image/png"))
    ] * 2
    huge = client.post("/v1/stylize", files=files, data={"style_weights": "1e308,1e308"})
    plain = client.post("/v1/stylize", files=files, data={"style_weights": "1,1"})
    assert huge.status_code == plain.status_code == 200
    assert huge.content == plain.content  # same ratios: the same image


@pytest.mark.parametrize(("width", "height", "size", "expected"), [(48, 32, 16, (24, 16))])
def test_the_minimum_size_holds_after_resizing(client, width, height, size, expected):
    response = _stylize(client, corpus.png(width, height), corpus.png(32, 32, 1), size=str(size))
    assert response.status_code == 200, response.text
    assert Image.open(io.BytesIO(response.content)).size == expected


# ------------------------------------------------------------------ decoding
def _flat_grey_png(side: int) -> bytes:
    pixels = np.zeros((side, side), np.uint8)
    pixels[::97] = 200
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def test_a_large_upload_is_shrunk_before_it_becomes_float(client):
    """Python-visible allocations (numpy's are traced) while a 2000 x 2000 greyscale PNG
    is stylised at size 64: the float copy of the full image would be 48 MB."""
    content = _flat_grey_png(2000)
    tracemalloc.start()
    try:
        response = _stylize(client, content, corpus.png(32, 32, 1), size="64")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 200
    assert Image.open(io.BytesIO(response.content)).size == (64, 64)
    assert peak < 8 * 1024 * 1024


class GatedShrink:
    """Wraps ``models.images.resize_to`` (the decoder's shrink): images wider than ``min_width`` wait for ``gate``;
    counts how many are inside at once."""

    def __init__(self, min_width: int):
        self.min_width = min_width
        self.gate, self.entered = threading.Event(), threading.Event()
        self.inside = self.most = 0
        self.lock = threading.Lock()
        self.shrink = model_images.resize_to

    def __call__(self, image, target):
        if image.size[0] < self.min_width:
            return self.shrink(image, target)
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        self.entered.set()
        try:
            assert self.gate.wait(30)
            return self.shrink(image, target)
        finally:
            with self.lock:
                self.inside -= 1


def _in_thread(target) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(target()))
    thread.start()
    return thread, out


def _wait_for(condition) -> None:
    for _ in range(3000):
        if condition():
            return
        threading.Event().wait(0.01)
    pytest.fail("condition never held")


def _one_at_a_time(gated, stylize, waiting) -> None:
    """Three ``stylize`` requests: the first holds ``gated``'s decode, the other two wait
    (``waiting()`` counts them) until it opens; then all three succeed, one decode at a
    time."""
    started = [_in_thread(stylize)]
    assert gated.entered.wait(30)
    started += [_in_thread(stylize) for _ in range(2)]
    _wait_for(lambda: waiting() == 2)
    gated.gate.set()
    for thread, _ in started:
        thread.join(30)
    assert gated.most == 1
    assert [out[0].status_code for _, out in started] == [200, 200, 200]


def test_large_decodes_are_bounded_by_the_setting(client_factory, monkeypatch):
    client = client_factory(max_concurrent_decodes=1, large_image_pixels=1000)
    gated = GatedShrink(min_width=40)  # the 48 x 32 contents; the 32 x 32 styles pass
    monkeypatch.setattr(model_images, "resize_to", gated)
    slots = client.app.state.decode_slots
    _one_at_a_time(
        gated,
        lambda: _stylize(client, corpus.png(), corpus.png(32, 32, 1)),
        lambda: slots.waiting,
    )


def test_small_images_do_not_queue_behind_large_decodes(client_factory, monkeypatch):
    client = client_factory(max_concurrent_decodes=1, large_image_pixels=10_000)
    gated = GatedShrink(min_width=200)
    monkeypatch.setattr(model_images, "resize_to", gated)
    large, out = _in_thread(lambda: _stylize(client, corpus.png(200, 200), corpus.png(seed=1)))
    try:
        assert gated.entered.wait(30)  # a large decode holds the only slot
        small = _stylize(client, corpus.png(), corpus.png(seed=1))
        assert small.status_code == 200  # served meanwhile
    finally:
        gated.gate.set()
        large.join(30)
    assert out[0].status_code == 200


def test_uploads_in_preparation_are_bounded_by_their_pixels(client_factory, monkeypatch):
    """Each request weighs 2 x 64^2 output pixels, the whole budget: one is read and
    decoded at a time, the others wait their turn (the decode slots do not bound them)."""
    client = client_factory(max_preparing_pixels=2 * 64 * 64, large_image_pixels=10**6)
    gated = GatedShrink(min_width=40)  # the 48 x 32 contents; the 32 x 32 styles pass
    monkeypatch.setattr(model_images, "resize_to", gated)
    preparation = client.app.state.preparation

    def stylize():
        return _stylize(client, corpus.png(), corpus.png(32, 32, 1), size="64")

    _one_at_a_time(gated, stylize, lambda: preparation.waiting)
    assert preparation.held == 0 and preparation.waiting == 0

"""``/v1/stylize`` with the real AdaIN model (skipped without ATELIER_WEIGHTS_DIR)."""

from __future__ import annotations

import concurrent.futures
import io
import json
import math
import os
from pathlib import Path

import corpus
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image
from service_fakes import make_settings

from service.app import create_app
from service.images import ImageLimits, decode_image

WEIGHTS = os.environ.get("ATELIER_WEIGHTS_DIR")

pytestmark = [
    pytest.mark.weights,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not WEIGHTS or not (Path(WEIGHTS) / "vgg19-normalised").is_dir(),
        reason="needs the pretrained VGG weights in ATELIER_WEIGHTS_DIR",
    ),
]


def _client(max_batch_wait_ms: float) -> TestClient:
    settings = make_settings(
        weights_dir=Path(WEIGHTS), load_models="adain", max_batch_wait_ms=max_batch_wait_ms
    )
    return TestClient(create_app(settings), raise_server_exceptions=False)


@pytest.fixture
def real_client():
    with _client(max_batch_wait_ms=0.0) as client:
        yield client


@pytest.fixture
def patient_client():
    """Waits up to 10 s for companions: a batch flushes only when full (4)."""
    with _client(max_batch_wait_ms=10_000.0) as client:
        yield client


def test_http_answer_matches_calling_the_model(real_client):
    content, style = corpus.png(48, 40, seed=4), corpus.png(32, 32, seed=5)
    response = real_client.post(
        "/v1/stylize",
        files=[("content", content), ("style", style)],
        data={"alpha": "0.8", "size": "64"},
    )
    assert response.status_code == 200, response.text
    got = np.asarray(Image.open(io.BytesIO(response.content)), dtype=np.float64) / 255.0

    model = real_client.app.state.pools["adain"].model
    limits = ImageLimits(max_pixels=10**6)
    direct = model.stylize(
        decode_image(content, limits)[None] / 255.0,
        [decode_image(style, limits)[None] / 255.0],
        alpha=0.8,
    )[0]
    expected = direct.permute(1, 2, 0).double().numpy()
    assert got.shape == expected.shape == (40, 48, 3)
    np.testing.assert_allclose(got, expected, atol=0.5 / 255 + 1e-6)  # PNG rounding only


def test_batched_requests_equal_single_ones(patient_client):
    """Four concurrent compatible requests share one forward and get their own answers."""
    style = corpus.png(32, 32, seed=9)
    contents = [corpus.png(40, 32, seed=s) for s in range(4)]
    batcher = patient_client.app.state.pools["adain"].batchers["cpu"]["interactive"]
    forwards_before, items_before = batcher.stats.forwards, batcher.stats.items

    def post(content):
        return patient_client.post(
            "/v1/stylize", files=[("content", content), ("style", style)], data={"size": "64"}
        )

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(post, contents))
    assert (batcher.stats.forwards, batcher.stats.items) == (forwards_before + 1, items_before + 4)
    model = patient_client.app.state.pools["adain"].model
    limits = ImageLimits(max_pixels=10**6)
    for content, response in zip(contents, responses, strict=True):
        got = torch.from_numpy(np.array(Image.open(io.BytesIO(response.content)))).float()
        alone = model.stylize(
            decode_image(content, limits)[None] / 255.0, [decode_image(style, limits)[None] / 255.0]
        )
        torch.testing.assert_close(got / 255, alone[0].permute(1, 2, 0), atol=1.5 / 255, rtol=0)


def test_each_preset_is_charged_the_real_model_figure(real_client):
    """The cost bound multiplies by the loaded model's own answer for the asked preset
    (listed in /v1/models): a budget of exactly that cost admits the request, one
    pixel-pass less refuses it, naming the figure."""
    model = real_client.app.state.pools["adain"].model
    listed = json.dumps(real_client.get("/v1/models").json())
    area = 64 * 64 * 2  # size 64, one content and one style
    files = [("content", corpus.png(64, 48, seed=1)), ("style", corpus.png(32, 32, seed=2))]
    settings = real_client.app.state.settings
    for preset in ("quality", "realtime"):
        passes = model.full_size_passes(preset)
        assert str(passes) in listed
        data = {"size": "64", "preset": preset}
        settings.max_stylize_pixel_passes = math.ceil(area * passes) - 1
        refused = real_client.post("/v1/stylize", files=files, data=data)
        assert refused.status_code == 422
        assert f"x {passes:g} full-size passes" in refused.json()["error"]["message"]
        settings.max_stylize_pixel_passes = math.ceil(area * passes)
        admitted = real_client.post("/v1/stylize", files=files, data=data)
        assert admitted.status_code == 200, admitted.text

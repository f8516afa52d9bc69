"""``POST /v1/stylize`` with a fake model: fields reach the model, images come back."""

from __future__ import annotations

import io

import corpus
import numpy as np
import pytest
from PIL import Image
from service_fakes import FakeStyleTransfer

from models.adain.presets import get_preset


def _post(client, content, styles, masks=(), **fields):
    files = [("content", ("c.png", content, "image/png"))]
    files += [("style", (f"s{i}.png", s, "image/png")) for i, s in enumerate(styles)]
    files += [("mask", (f"m{i}.png", m, "image/png")) for i, m in enumerate(masks)]
    return client.post("/v1/stylize", files=files, data={k: str(v) for k, v in fields.items()})


def _pixels(response) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(response.content)).convert("RGB"), dtype=np.float64)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_alpha_blends_content_and_style_colour(client, alpha):
    content, style = (200, 40, 10), (20, 100, 240)
    response = _post(
        client, corpus.solid_png(content), [corpus.solid_png(style, 32, 32)], alpha=alpha
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/png"
    expected = (1 - alpha) * np.array(content) + alpha * np.array(style)
    got = _pixels(response)
    assert got.shape == (24, 40, 3)
    np.testing.assert_allclose(got, np.broadcast_to(expected, got.shape), atol=1.0)


def test_a_still_is_told_from_a_video_without_asking_the_video_code(client, monkeypatch):
    """A photo's first bytes name it (``models.images.sniff``): ``models.video`` is never
    asked whether it is a video."""

    def refuse(*args, **kwargs):
        raise AssertionError("models.video was asked about a still")

    monkeypatch.setattr("service.routes.stylize.looks_like_video", refuse)
    monkeypatch.setattr("service.routes.stylize_video.probe", refuse)
    response = _post(client, corpus.png(40, 24), [corpus.png(32, 32)])
    assert response.status_code == 200, response.text


def test_style_weights_mix_the_styles(client):
    red, blue = (255, 0, 0), (0, 0, 255)
    response = _post(
        client,
        corpus.solid_png((0, 0, 0)),
        [corpus.solid_png(red), corpus.solid_png(blue)],
        style_weights="3,1",
    )
    assert response.status_code == 200, response.text
    expected = 0.75 * np.array(red) + 0.25 * np.array(blue)
    np.testing.assert_allclose(_pixels(response)[0, 0], expected, atol=1.0)


def test_preserve_color_reaches_the_model(client):
    data = corpus.png(40, 24)
    response = _post(client, data, [corpus.solid_png((0, 0, 255))], preserve_color="true")
    reference = np.asarray(Image.open(io.BytesIO(data)), dtype=np.float64)
    np.testing.assert_allclose(_pixels(response), reference, atol=1.0)


def test_preset_reaches_the_model_and_defaults_to_quality(fakes, client):
    content, style = corpus.png(40, 24), corpus.png(32, 32, seed=1)
    assert _post(client, content, [style]).status_code == 200
    assert _post(client, content, [style], preset="realtime").status_code == 200
    assert fakes.adain["cpu"].presets == ["quality", "realtime"]


def test_unknown_preset_is_a_validation_error(client):
    response = _post(client, corpus.png(40, 24), [corpus.png(32, 32)], preset="turbo")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"


def test_size_shrinks_the_longer_side(client):
    response = _post(client, corpus.png(200, 100), [corpus.png(64, 64)], size=64)
    assert response.status_code == 200
    assert Image.open(io.BytesIO(response.content)).size == (64, 32)


@pytest.mark.parametrize(("fmt", "pil_name"), [("jpeg", "JPEG"), ("webp", "WEBP")])
def test_output_format(client, fmt, pil_name):
    response = _post(client, corpus.png(), [corpus.png(seed=3)], format=fmt)
    assert response.status_code == 200
    assert response.headers["content-type"] == f"image/{fmt}"
    assert Image.open(io.BytesIO(response.content)).format == pil_name


def _halves(left: tuple[int, int, int], right: tuple[int, int, int]) -> bytes:
    """An 80 x 48 PNG (twice the photo's sides: masks are resized to it) in two halves."""
    image = Image.new("RGB", (80, 48), left)
    image.paste(right, (40, 0, 80, 48))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def test_masks_choose_the_style_per_pixel(client):
    """Style 0 (red) where its mask is white, style 1 (blue) where its own is; where no
    mask reaches 0.5 the photo (green) stays."""
    white, black, grey = (255, 255, 255), (0, 0, 0), (90, 90, 90)
    red, blue, green = (255, 0, 0), (0, 0, 255), (0, 160, 0)
    response = _post(
        client,
        corpus.solid_png(green, 40, 24),
        [corpus.solid_png(red, 16, 16), corpus.solid_png(blue, 16, 16)],
        masks=[_halves(white, black), _halves(black, grey)],
    )
    assert response.status_code == 200, response.text
    got = _pixels(response)
    assert got.shape == (24, 40, 3)
    np.testing.assert_allclose(got[:, :18], np.broadcast_to(red, (24, 18, 3)), atol=1.0)
    np.testing.assert_allclose(got[:, 22:], np.broadcast_to(green, (24, 18, 3)), atol=1.0)
    swapped = _post(
        client,
        corpus.solid_png(green, 40, 24),
        [corpus.solid_png(red, 16, 16), corpus.solid_png(blue, 16, 16)],
        masks=[_halves(black, white), _halves(white, black)],
    )
    got = _pixels(swapped)
    np.testing.assert_allclose(got[:, :18], np.broadcast_to(blue, (24, 18, 3)), atol=1.0)
    np.testing.assert_allclose(got[:, 22:], np.broadcast_to(red, (24, 18, 3)), atol=1.0)


def test_masks_with_style_weights_are_rejected(client):
    white = corpus.solid_png((255, 255, 255))
    response = _post(
        client,
        corpus.png(),
        [corpus.png(seed=1)],
        masks=[white],
        style_weights="1",
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["message"] == (
        "mask: style_weights and masks cannot be combined: masks choose the style"
    )


@pytest.mark.parametrize(
    ("fields", "masks", "message"),
    [
        ({"style_weights": "1"}, 0, "style_weights: got 1 style weights for 2 styles"),
        (
            {"style_weights": "1,-1"},
            0,
            "style_weights: style weights must be finite, >= 0 and not all 0, got [1.0, -1.0]",
        ),
        ({}, 1, "mask: got 1 masks for 2 styles; need one per style"),
    ],
)
def test_weights_and_masks_are_refused_with_the_model_message(
    fakes, client, fields, masks, message
):
    white = corpus.solid_png((255, 255, 255))
    styles = [corpus.png(seed=1), corpus.png(seed=2)]
    response = _post(client, corpus.png(), styles, masks=[white] * masks, **fields)
    assert response.status_code == 422
    assert response.json()["error"]["message"] == message
    assert fakes.adain["cpu"].batch_sizes == []


def test_concurrent_compatible_requests_share_a_forward(fakes, client_factory):
    import concurrent.futures

    client = client_factory(max_batch_wait_ms=10_000.0, max_batch_size=4)
    content, style = corpus.png(40, 24), corpus.png(32, 32, seed=1)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(lambda _: _post(client, content, [style]), range(4)))
    assert [r.status_code for r in responses] == [200] * 4
    assert fakes.adain["cpu"].batch_sizes == [4]  # a full batch flushes without waiting 10 s


def test_request_id_is_echoed_or_made_up(client):
    mine = client.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert mine.headers["X-Request-ID"] == "abc-123"
    made_up = client.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert made_up.headers["X-Request-ID"] != "bad id with spaces"
    assert len(made_up.headers["X-Request-ID"]) == 32


def test_style_scale_reaches_the_model_and_defaults_to_one(fakes, client):
    content, style = corpus.png(40, 24), corpus.png(32, 32, seed=1)
    assert _post(client, content, [style]).status_code == 200
    assert _post(client, content, [style], style_scale=1.5).status_code == 200
    assert fakes.adain["cpu"].style_scales == [1.0, 1.5]


@pytest.mark.parametrize("bad", ["0.1", "2.5", "nan", "inf", "big"])
def test_style_scale_out_of_range_is_a_validation_error_naming_the_field(fakes, client, bad):
    response = _post(client, corpus.png(40, 24), [corpus.png(32, 32)], style_scale=bad)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "validation_error" and "style_scale" in error["message"]
    assert fakes.adain["cpu"].batch_sizes == []


def test_a_larger_style_scale_counts_in_the_cost_budget(client_factory, fakes):
    client = client_factory(max_stylize_pixel_passes=17_000)
    content, style = corpus.png(64, 48), corpus.png(32, 32)
    # quality: 1/64 + 1/16 + 1/4 + 1 = 1.328125 full-size passes, so
    # 64^2 x (1 content + 1 style x 1.5^2) x 1.328125 = 17680 pixel-passes
    assert get_preset("quality").full_size_passes == 1.328125
    response = _post(client, content, [style], size=64, style_scale=1.5)
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert "17680" in message and "style_scale" in message and "17000" in message
    # a style scale below 1 shrinks the style: the bound stays 64^2 x 2 x 1.328125 = 10880
    assert _post(client, content, [style], size=64, style_scale=0.5).status_code == 200


def test_the_cost_bound_charges_the_passes_of_the_asked_preset(client_factory, fakes, monkeypatch):
    """The route charges the figure the model gives for the asked preset: a budget between
    two presets' figures admits the same request with the cheaper and refuses the other.
    (The shipped presets both count 1.328125 full-size passes, so the fake's are set.)"""
    figures = {"quality": 1.5, "realtime": 0.5}
    monkeypatch.setattr(
        FakeStyleTransfer, "full_size_passes", lambda self, preset=None: figures[preset]
    )
    client = client_factory(max_stylize_pixel_passes=64 * 64 * 2)
    content, style = corpus.png(64, 48), corpus.png(32, 32)
    refused = _post(client, content, [style], size=64, preset="quality")
    assert refused.status_code == 422
    assert "x 1.5 full-size passes" in refused.json()["error"]["message"]
    assert _post(client, content, [style], size=64, preset="realtime").status_code == 200
    assert fakes.adain["cpu"].presets == ["realtime"]

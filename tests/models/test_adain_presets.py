"""Presets on seeded random networks: the realtime composition, its pieces, the wiring."""

from __future__ import annotations

import dataclasses
from typing import get_args

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from models.adain import StyleTransfer
from models.adain.images import resize_max_side
from models.adain.presets import (
    PRESETS,
    PresetName,
    detail_energy,
    get_preset,
    matched_detail_gain,
    restore_detail,
    scale_image,
)

pytestmark = pytest.mark.usefixtures("single_thread")

#: A working side small enough for the full VGG on tiny images.
SMALL_SIDE = 16


def _images(*shape, seed):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)


@pytest.fixture
def model(tiny_networks):
    encoder, decoders = tiny_networks
    return StyleTransfer(encoder, decoders)


@pytest.fixture
def small_realtime(monkeypatch):
    """The realtime preset with a 16 px working side (same passes, gain, detail levels)."""
    preset = dataclasses.replace(PRESETS["realtime"], working_side=SMALL_SIDE)
    monkeypatch.setitem(PRESETS, "realtime", preset)
    return preset


def test_names_match_the_schema_literal_and_unknown_names_are_refused():
    assert set(get_args(PresetName)) == set(PRESETS)
    assert get_preset("quality").working_side is None
    with pytest.raises(
        ValueError, match=r"unknown preset 'turbo'; valid: \['quality', 'realtime'\]"
    ):
        get_preset("turbo")


def test_restore_detail_against_a_float64_reference():
    content = _images(2, 3, 24, 32, seed=1)
    small = resize_max_side(content, 16)
    stylised = _images(2, 3, *small.shape[-2:], seed=2)
    for gain in (1.0, 2.0):
        up = lambda x: F.interpolate(x.double(), size=(24, 32), mode="bilinear")  # noqa: E731
        expected = (up(stylised) + gain * (content.double() - up(small))).clamp(0, 1)
        got = restore_detail(stylised, small, content, gain=gain)
        torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-6)


def test_detail_energy_and_matched_gain_against_a_float64_reference():
    content = _images(2, 3, 24, 32, seed=5)
    small = resize_max_side(content, 16)
    styles = [_images(1, 3, 40, 40, seed=6) * scale for scale in (1.0, 0.2)]
    smalls = [resize_max_side(style, 20) for style in styles]

    def energy(image, low):
        up = F.interpolate(low.double(), size=image.shape[-2:], mode="bilinear")
        return ((image.double() - up) ** 2).mean(dim=(1, 2, 3))

    torch.testing.assert_close(detail_energy(content, small).double(), energy(content, small))
    weights = [0.75, 0.25]
    mixed = sum(w * energy(s, low) for w, s, low in zip(weights, styles, smalls, strict=True))
    expected = (mixed / energy(content, small)).sqrt().clamp(0.5, 4.0)
    got = matched_detail_gain(
        content, small, list(zip(styles, smalls, strict=True)), weights, (0.5, 4.0)
    )
    assert got.shape == (2, 1, 1, 1)
    torch.testing.assert_close(got.double().flatten(), expected, rtol=1e-5, atol=0)
    # a style with more fine detail than the photo gets a larger gain, within the bounds
    strong = matched_detail_gain(content, small, [(styles[0], smalls[0])], None, (1.0, 4.0))
    faint = matched_detail_gain(content, small, [(styles[1], smalls[1])], None, (1.0, 4.0))
    assert (faint <= strong).all() and (faint >= 1.0).all() and (strong <= 4.0).all()
    fixed = matched_detail_gain(content, small, [(styles[0], smalls[0])], None, (2.0, 2.0))
    assert torch.equal(fixed, torch.full((2, 1, 1, 1), 2.0))


def test_restore_detail_of_an_unchanged_image_is_the_photo():
    content = _images(1, 3, 24, 32, seed=3)
    small = resize_max_side(content, 12)
    torch.testing.assert_close(restore_detail(small, small, content), content, rtol=0, atol=1e-6)


def test_scale_image_keeps_the_minimum_side_and_never_upscales():
    style = _images(1, 3, 40, 200, seed=4)
    assert scale_image(style, 0.25, min_side=16).shape[-2:] == (16, 80)
    assert scale_image(style, 0.5, min_side=16).shape[-2:] == (20, 100)
    assert scale_image(style, 1.0, min_side=16) is style


def test_realtime_on_a_small_image_is_its_passes_at_full_size(model):
    content, style = _images(1, 3, 16, 16, seed=1), _images(1, 3, 16, 16, seed=2)
    realtime = model.stylize(content, [style], preset="realtime")
    passes = model.stylize(content, [style], levels=PRESETS["realtime"].levels)
    torch.testing.assert_close(realtime, passes, rtol=0, atol=0)


def test_realtime_is_low_resolution_passes_restored_detail_then_full_size_passes(
    model, small_realtime
):
    content, style = _images(1, 3, 24, 32, seed=1), _images(1, 3, 40, 40, seed=2)
    got = model.stylize(content, [style], preset="realtime")
    assert got.shape == content.shape

    small = resize_max_side(content, SMALL_SIDE)  # 12 x 16: the photo scaled by 1/2
    small_style = resize_max_side(style, 20)
    low = model.stylize(small, [small_style], levels=small_realtime.levels, preset="quality")
    gain = matched_detail_gain(
        content, small, [(style, small_style)], None, small_realtime.detail_gain_bounds
    )
    restored = restore_detail(low, small, content, gain=gain)
    expected = model.stylize(
        restored, [style], levels=small_realtime.detail_levels, preset="quality"
    )
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_the_model_default_preset_is_used_and_described(tiny_networks, small_realtime):
    encoder, decoders = tiny_networks
    default_realtime = StyleTransfer(encoder, decoders, preset="realtime")
    content, style = _images(1, 3, 24, 32, seed=1), _images(1, 3, 24, 24, seed=2)
    torch.testing.assert_close(
        default_realtime.stylize(content, [style]),
        default_realtime.stylize(content, [style], preset="realtime"),
    )
    assert default_realtime.describe()["preset"] == "realtime"
    with pytest.raises(ValueError, match="unknown preset"):
        StyleTransfer(encoder, decoders, preset="turbo")


def test_realtime_masks_full_mask_equals_unmasked(model, small_realtime):
    content, style = _images(1, 3, 24, 32, seed=1), _images(1, 3, 24, 24, seed=2)
    masked = model.stylize(content, [style], masks=[torch.ones(1, 1, 24, 32)], preset="realtime")
    plain = model.stylize(content, [style], preset="realtime")
    torch.testing.assert_close(masked, plain, rtol=1e-4, atol=1e-5)


def test_realtime_preserve_color_keeps_the_photo_chroma_mean(model, small_realtime):
    from models.adain.color import rgb_to_ycbcr

    content, style = _images(1, 3, 24, 32, seed=1), _images(1, 3, 24, 24, seed=2)
    out = model.stylize(content, [style], preserve_color=True, preset="realtime")
    chroma = lambda x: rgb_to_ycbcr(x)[:, 1:].mean(dim=(2, 3))  # noqa: E731
    assert float((chroma(out) - chroma(content)).abs().max()) < 0.05


def test_realtime_batch_of_different_styles_matches_separate_calls(model, small_realtime):
    """The service batches realtime requests with different styles: each row keeps its own
    detail gain and its own folded AdaIN affine."""
    contents = _images(2, 3, 24, 32, seed=7)
    styles = torch.cat([_images(1, 3, 32, 32, seed=8), _images(1, 3, 32, 32, seed=9) * 0.3])
    batched = model.stylize(contents, [styles], preset="realtime")
    for b in range(2):
        single = model.stylize(contents[b : b + 1], [styles[b : b + 1]], preset="realtime")
        torch.testing.assert_close(batched[b : b + 1], single, rtol=1e-4, atol=1e-5)

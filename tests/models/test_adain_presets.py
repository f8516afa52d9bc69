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
    TEXTURE_BLOCK,
    PresetName,
    detail_band,
    detail_weights,
    energy,
    get_preset,
    local_energy,
    matched_detail,
    restore_detail,
    scale_image,
    shuffled_texture,
    sine_window,
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
    """The realtime preset with a 16 px working side (same passes, texture, detail levels)."""
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


def _up64(image, size):
    return F.interpolate(image.double(), size=size, mode="bilinear")


def test_restore_detail_and_detail_band_against_a_float64_reference():
    content = _images(2, 3, 24, 32, seed=1)
    small = resize_max_side(content, 16)
    stylised = _images(2, 3, *small.shape[-2:], seed=2)
    band = content.double() - _up64(small, (24, 32))
    torch.testing.assert_close(detail_band(content, small).double(), band, rtol=0, atol=1e-6)
    torch.testing.assert_close(energy(band), band.square().mean(dim=(1, 2, 3)))
    detail = _images(2, 3, 24, 32, seed=3) - 0.5
    expected = (_up64(stylised, (24, 32)) + detail.double()).clamp(0, 1)
    got = restore_detail(stylised, detail)
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-6)


def _shuffled_texture_reference(detail, size, block):
    """The documented layout, patch by patch in float64: cell c takes patch pi(c)."""
    detail = detail.double()
    half, height, width = block // 2, *size
    rows, cols = detail.shape[-2] // block, detail.shape[-1] // block
    padded = F.pad(detail[..., : rows * block, : cols * block], (half,) * 4, mode="reflect")
    cells_y, cells_x = -(-height // block), -(-width // block)
    order = torch.randint(
        rows * cols, (cells_y * cells_x,), generator=torch.Generator().manual_seed(0)
    )
    window = sine_window(2 * block)
    window = window[:, None] * window[None, :]
    canvas = torch.zeros(
        *detail.shape[:2], (cells_y + 1) * block, (cells_x + 1) * block, dtype=torch.float64
    )
    for cell, patch in enumerate(order.tolist()):
        (y, x), (r, q) = divmod(cell, cells_x), divmod(patch, cols)
        source = padded[..., r * block : (r + 2) * block, q * block : (q + 2) * block]
        canvas[..., y * block : (y + 2) * block, x * block : (x + 2) * block] += window * source
    return canvas[..., half : half + height, half : half + width]


@pytest.mark.parametrize(
    ("detail_shape", "size", "block"), [((2, 3, 40, 56), (30, 50), 8), ((1, 3, 12, 9), (20, 17), 4)]
)
def test_shuffled_texture_against_a_float64_reference(detail_shape, size, block):
    detail = _images(*detail_shape, seed=11) - 0.5
    got = shuffled_texture(detail, size, block=block)
    assert got.shape == (*detail_shape[:2], *size)
    torch.testing.assert_close(
        got.double(), _shuffled_texture_reference(detail, size, block), rtol=0, atol=1e-6
    )


def test_sine_window_squares_sum_to_one_over_half_overlaps():
    window = sine_window(2 * TEXTURE_BLOCK)
    overlap = window[:TEXTURE_BLOCK] ** 2 + window[TEXTURE_BLOCK:] ** 2
    torch.testing.assert_close(overlap, torch.ones_like(overlap), rtol=0, atol=1e-12)


def test_shuffled_texture_keeps_the_variance_and_is_the_same_in_every_batch():
    noise = torch.randn(3, 3, 128, 96, generator=torch.Generator().manual_seed(12))
    texture = shuffled_texture(noise, (160, 200))
    assert abs(float(texture.var()) - 1.0) < 0.1  # independent blocks: w^2 sums to 1
    torch.testing.assert_close(
        shuffled_texture(noise[1:2], (160, 200)), texture[1:2], rtol=0, atol=0
    )
    # a block larger than the detail shrinks to fit it
    assert shuffled_texture(noise[..., :6, :6], (20, 20)).shape == (3, 3, 20, 20)


def _bilinear_rows64(values, size):
    """``values`` ``(n, m)`` interpolated to ``(n, size)`` between cell centres, clamped at
    the ends (half-pixel centres, as ``align_corners=False``), in float64 loops."""
    cells = values.shape[1]
    out = torch.empty(values.shape[0], size, dtype=torch.float64)
    for i in range(size):
        position = max((i + 0.5) * cells / size - 0.5, 0.0)
        left = min(int(position), cells - 1)
        right = min(left + 1, cells - 1)
        frac = position - left
        out[:, i] = (1 - frac) * values[:, left] + frac * values[:, right]
    return out


@pytest.mark.parametrize("shape", [(20, 24), (17, 23)])  # whole blocks; blocks cut at the edge
def test_local_energy_against_a_float64_reference(shape):
    window = 4
    detail = _images(2, 3, *shape, seed=8) - 0.5
    per_pixel = detail.double().square().mean(dim=1)  # (2, H, W)
    height, width = shape
    rows, cols = -(-height // window), -(-width // window)
    expected = torch.empty(2, height, width, dtype=torch.float64)
    for n in range(2):
        means = torch.empty(rows, cols, dtype=torch.float64)
        for i in range(rows):
            for j in range(cols):
                block = per_pixel[n, i * window : (i + 1) * window, j * window : (j + 1) * window]
                means[i, j] = block.mean()
        along_x = _bilinear_rows64(means, width)  # (rows, W)
        expected[n] = _bilinear_rows64(along_x.T.contiguous(), height).T
    got = local_energy(detail, window)
    assert got.shape == (2, 1, *shape)
    torch.testing.assert_close(got[:, 0].double(), expected, rtol=1e-5, atol=1e-7)


def test_detail_weights_give_the_band_the_style_energy():
    photo_energy = torch.tensor([1.0, 0.25, 0.5, 0.0], dtype=torch.float64)
    style_energy = torch.tensor([0.5, 1.0, 0.5, 0.3], dtype=torch.float64)
    photo, fill = detail_weights(photo_energy, style_energy)
    expected_photo = torch.tensor([0.5**0.5, 1.0, 1.0, 1.0], dtype=torch.float64)
    expected_fill = torch.tensor([0.0, 0.75**0.5, 0.0, 1.0], dtype=torch.float64)
    torch.testing.assert_close(photo.flatten(), expected_photo)
    torch.testing.assert_close(fill.flatten(), expected_fill)
    total = photo.flatten() ** 2 * photo_energy + fill.flatten() ** 2 * style_energy
    torch.testing.assert_close(total, style_energy)


def test_matched_detail_against_a_float64_reference():
    content = 0.4 + 0.2 * _images(2, 3, 24, 32, seed=5)  # less fine detail than the styles
    content[1] = _images(3, 24, 32, seed=4)  # more fine detail than the faint style
    small = resize_max_side(content, 16)
    styles = [_images(1, 3, 40, 40, seed=6) * scale for scale in (1.0, 0.4)]
    smalls = [resize_max_side(style, 20) for style in styles]
    pairs = list(zip(styles, smalls, strict=True))
    photo = content.double() - _up64(small, (24, 32))

    def texture(style, low):  # shuffled_texture is checked against its own reference above
        band = style - F.interpolate(low, size=style.shape[-2:], mode="bilinear")
        return shuffled_texture(band, (24, 32), block=8).double()

    def band_energy(image):
        return image.square().mean(dim=(1, 2, 3))

    photo_energy = local_energy(photo, 8)  # checked against its own reference above

    def weights_of(style_energy):
        ratio = style_energy.view(-1, 1, 1, 1) / photo_energy
        return ratio.clamp(max=1).sqrt(), (1 - 1 / ratio).clamp_min(0).sqrt()

    energies = [band_energy(s.double() - _up64(low, s.shape[-2:])) for s, low in pairs]
    weights = [0.75, 0.25]
    a, b = weights_of(sum(w * e for w, e in zip(weights, energies, strict=True)))
    textures = [texture(s, low) for s, low in pairs]
    expected = a * photo + b * sum(w**0.5 * t for w, t in zip(weights, textures, strict=True))
    band = detail_band(content, small)
    got = matched_detail(band, pairs, weights=weights, block=8, window=8)
    assert got.shape == (2, 3, 24, 32)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-6)
    # both sides of the energy match are tested
    assert float(b[0].min()) > 0.1 and float(a[1].max()) < 1.0

    # with region labels each pixel takes its own style's band; a pixel of no style keeps
    # the photo's
    labels = torch.full((2, 24, 32), -1)
    labels[:, :, :10], labels[:, :, 20:] = 0, 1
    regional = (labels < 0).unsqueeze(1) * photo
    for k, (t, e) in enumerate(zip(textures, energies, strict=True)):
        a, b = weights_of(e)
        regional = regional + (labels == k).unsqueeze(1) * (a * photo + b * t)
    got = matched_detail(band, pairs, labels=labels, block=8, window=8)
    torch.testing.assert_close(got.double(), regional, rtol=1e-5, atol=1e-6)


def test_matched_detail_fills_flat_regions_and_tones_down_busy_ones():
    # left half flat, right half busier than the style: a global energy match would give
    # the whole image a little texture; the local one gives the flat half the style's
    # texture alone and the busy half the photo's detail toned down, with no texture
    content = torch.full((1, 3, 32, 64), 0.5)
    content[..., 32:] = _images(1, 3, 32, 32, seed=9)
    small = resize_max_side(content, 32)
    style = 0.5 + 0.2 * (_images(1, 3, 48, 48, seed=10) - 0.5)
    small_style = resize_max_side(style, 24)
    band = detail_band(content, small)
    texture = shuffled_texture(detail_band(style, small_style), (32, 64), block=8)
    got = matched_detail(band, [(style, small_style)], block=8, window=8)
    flat, busy = slice(0, 12), slice(44, 64)  # beyond the reach of the other half's windows
    assert float(band[..., flat].abs().max()) == 0.0
    torch.testing.assert_close(got[..., flat], texture[..., flat], rtol=0, atol=1e-6)
    ratio = got[..., busy] / band[..., busy]
    assert float(ratio.min()) > 0.0 and float(ratio.max()) < 0.9
    # without texture, the busy half's band is the photo's, scaled per pixel
    torch.testing.assert_close(got[..., busy], ratio.mean(dim=1, keepdim=True) * band[..., busy])


def test_restore_detail_of_an_unchanged_image_is_the_photo():
    content = _images(1, 3, 24, 32, seed=3)
    small = resize_max_side(content, 12)
    restored = restore_detail(small, detail_band(content, small))
    torch.testing.assert_close(restored, content, rtol=0, atol=1e-6)


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


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_realtime_is_low_resolution_passes_restored_detail_then_full_size_passes(
    model, small_realtime, alpha
):
    content = 0.4 + 0.2 * _images(1, 3, 24, 32, seed=1)  # less fine detail than the style
    style = _images(1, 3, 40, 40, seed=2)
    got = model.stylize(content, [style], alpha=alpha, preset="realtime")
    assert got.shape == content.shape

    small = resize_max_side(content, SMALL_SIDE)  # 12 x 16: the photo scaled by 1/2
    small_style = resize_max_side(style, 20)
    low = model.stylize(
        small, [small_style], levels=small_realtime.levels, alpha=alpha, preset="quality"
    )
    photo = detail_band(content, small)
    matched = matched_detail(photo, [(style, small_style)])
    assert float((matched - photo).abs().max()) > 0.01
    restored = restore_detail(low, torch.lerp(photo, matched, alpha))
    expected = model.stylize(
        restored, [style], levels=small_realtime.detail_levels, alpha=alpha, preset="quality"
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
    texture and its own folded AdaIN affine."""
    contents = _images(2, 3, 24, 32, seed=7)
    styles = torch.cat([_images(1, 3, 32, 32, seed=8), _images(1, 3, 32, 32, seed=9) * 0.3])
    batched = model.stylize(contents, [styles], preset="realtime")
    for b in range(2):
        single = model.stylize(contents[b : b + 1], [styles[b : b + 1]], preset="realtime")
        torch.testing.assert_close(batched[b : b + 1], single, rtol=1e-4, atol=1e-5)

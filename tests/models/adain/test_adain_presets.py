"""Presets on seeded random networks: the pyramid's composition, its pieces
(the pyramid of :mod:`models.adain.presets`), style_scale, the cost of each preset."""

from __future__ import annotations

from typing import get_args

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from models.adain import StyleTransfer
from models.adain.color import rgb_to_ycbcr
from models.adain.pipeline import pad_to_multiple
from models.adain.presets import (
    MAX_STYLE_SCALE,
    MIN_STYLE_SCALE,
    PRESETS,
    PresetName,
    check_style_scale,
    get_preset,
    next_stage_start,
    resize,
    style_at,
)
from models.adain.whitening import CovarianceStats, wct_transfer
from models.vgg import LEVELS
from tests.models.seeded import seeded_rand

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture
def model(tiny_networks):
    """Random networks whose decoders answer around mid-grey (so few pixels are clamped)."""
    encoder, decoders = tiny_networks
    with torch.no_grad():
        for decoder in decoders.values():
            decoder.layers[-1].bias.add_(0.5)
    return StyleTransfer(encoder, decoders)


def test_names_match_the_schema_literal_and_unknown_names_are_refused():
    assert set(get_args(PresetName)) == set(PRESETS)
    for preset in PRESETS.values():
        assert preset.stages[-1].factor == 1.0 and preset.transform == "wct"
    with pytest.raises(
        ValueError, match=r"unknown preset 'turbo'; valid: \['quality', 'realtime'\]"
    ):
        get_preset("turbo")


def _resize64(image, size):
    shrinks = size[0] < image.shape[-2] or size[1] < image.shape[-1]
    out = F.interpolate(image.double(), size=size, mode="bilinear", antialias=shrinks)
    return out.clamp(0, 1)


def _keys(distance: torch.Tensor, a: float = -0.75) -> torch.Tensor:
    """Keys' cubic convolution kernel at ``distance`` (float64)."""
    d = distance.abs()
    near = (a + 2) * d**3 - (a + 3) * d**2 + 1
    far = a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
    return torch.where(d <= 1, near, torch.where(d < 2, far, torch.zeros_like(d)))


def _upsample2x_keys64(image: torch.Tensor, dim: int) -> torch.Tensor:
    """``image`` twice as long along ``dim`` by Keys' cubic kernel, sample centres aligned
    (output ``i`` reads the input at ``(i + 0.5) / 2 - 0.5``), edge samples repeated."""
    n = image.shape[dim]
    source = (torch.arange(2 * n, dtype=torch.float64) + 0.5) / 2 - 0.5
    base = source.floor()
    out = torch.zeros_like(image.repeat_interleave(2, dim=dim))
    for tap in range(-1, 3):
        index = (base + tap).long()
        weight = _keys(source - (base + tap))
        shape = [1] * image.dim()
        shape[dim] = 2 * n
        out += image.index_select(dim, index.clamp(0, n - 1)) * weight.view(shape)
    return out


def test_resize_and_the_next_stage_start_against_float64_references():
    image = seeded_rand(2, 3, 24, 32, seed=1)
    assert resize(image, (24, 32)) is image
    for size in ((6, 8), (48, 64)):
        torch.testing.assert_close(
            resize(image, size).double(), _resize64(image, size), rtol=0, atol=1e-6
        )
    photo, small = image, resize(image, (12, 16))
    stylised = seeded_rand(2, 3, 12, 16, seed=2)
    up = _upsample2x_keys64(_upsample2x_keys64(stylised.double() - small.double(), -1), -2)
    expected = (photo.double() + up).clamp(0, 1)
    torch.testing.assert_close(
        next_stage_start(photo, stylised, small).double(), expected, rtol=0, atol=1e-6
    )
    # an unchanged coarse stage gives back the photo itself
    torch.testing.assert_close(next_stage_start(photo, small, small), photo, rtol=0, atol=1e-6)


def test_style_at_sizes_the_style_by_the_stage_and_the_style_scale():
    style = seeded_rand(1, 3, 40, 200, seed=4)
    assert style_at(style, 100, 1.0, min_side=16).shape[-2:] == (20, 100)
    assert style_at(style, 100, 2.0, min_side=16).shape[-2:] == (40, 200)
    assert style_at(style, 100, 0.5, min_side=16).shape[-2:] == (16, 80)  # the minimum side
    assert style_at(style, 200, 2.0, min_side=16).shape[-2:] == (80, 400)  # enlarged
    assert style_at(style, 200, 1.0, min_side=16) is style


@pytest.mark.parametrize("bad", [MIN_STYLE_SCALE / 2, MAX_STYLE_SCALE * 1.5, float("nan")])
def test_style_scale_outside_its_range_is_refused(model, bad):
    assert check_style_scale(MIN_STYLE_SCALE) == MIN_STYLE_SCALE
    with pytest.raises(ValueError, match=r"style_scale must be in \[0.25, 2.0\]"):
        check_style_scale(bad)
    with pytest.raises(ValueError, match="style_scale"):
        model.stylize(
            seeded_rand(1, 3, 16, 16, seed=1), [seeded_rand(1, 3, 16, 16, seed=2)], style_scale=bad
        )


def _reference(model, content, style, preset, alpha=1.0, style_scale=1.0):
    """The documented pyramid from its pieces, without the folded decoder convolutions."""
    encoder, decoders = model.encoder, model.decoders
    height, width = content.shape[-2:]
    previous = previous_photo = None
    for stage in preset.stages:
        size = (round(height * stage.factor), round(width * stage.factor))
        photo = _resize64(content, size).float()
        start = photo if previous is None else next_stage_start(photo, previous, previous_photo)
        side = round(max(size) * style_scale)
        factor = max(side / max(style.shape[-2:]), 16 / min(style.shape[-2:]))
        style_size = tuple(max(1, round(s * factor)) for s in style.shape[-2:])
        small_style = _resize64(style, style_size).float()
        image, _ = pad_to_multiple(start, 4)
        padded_photo, _ = pad_to_multiple(photo, 4)
        for level in stage.levels:
            stats = CovarianceStats.of(encoder.encode(small_style, level))
            anchor = encoder.encode(padded_photo, level) if alpha < 1 else None
            features = encoder.encode(image, level)
            restyled = wct_transfer(features, [stats], weights=[1.0], alpha=alpha, anchor=anchor)
            image = decoders[level](restyled)
        previous, previous_photo = image[..., : size[0], : size[1]].clamp(0, 1), photo
    return previous


@pytest.mark.parametrize("name", ["quality", "realtime"])
@pytest.mark.parametrize(("alpha", "style_scale"), [(1.0, 1.0), (0.5, 1.0), (1.0, 2.0)])
def test_a_preset_is_its_pyramid_of_wct_passes(model, name, alpha, style_scale):
    content, style = seeded_rand(1, 3, 32, 40, seed=1), seeded_rand(1, 3, 36, 36, seed=2)
    with torch.no_grad():
        got = model.stylize(content, [style], preset=name, alpha=alpha, style_scale=style_scale)
        expected = _reference(model, content, style, PRESETS[name], alpha, style_scale)
    assert got.shape == content.shape
    assert float(got.std()) > 0.02  # not clamped flat: the comparison means something
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_every_stage_sees_the_style_at_its_own_scale(model, monkeypatch):
    seen = []
    original = StyleTransfer.style_stats

    def spy(self, style, levels, transform="adain", *, key=None):
        seen.append((tuple(style.shape[-2:]), tuple(levels), transform))
        return original(self, style, levels, transform, key=key)

    monkeypatch.setattr(StyleTransfer, "style_stats", spy)
    content, style = seeded_rand(1, 3, 64, 48, seed=1), seeded_rand(1, 3, 60, 80, seed=2)
    model.stylize(content, [style], preset="quality", style_scale=2.0)
    stages = PRESETS["quality"].stages
    # the stages' longer sides are 64 x factor: the style's is twice that (at least 16 px
    # on its shorter side)
    sides = [round(64 * stage.factor) * 2 for stage in stages]
    assert [shape for shape, _, _ in seen] == [
        (max(16, side * 3 // 4), max(side, 16 * 4 // 3)) for side in sides
    ]
    assert [(levels, transform) for _, levels, transform in seen] == [
        (stage.levels, "wct") for stage in stages
    ]


@pytest.mark.parametrize("name", ["quality", "realtime"])
def test_alpha_zero_is_the_last_pass_reconstruction_of_the_photo(model, name):
    content, style = seeded_rand(1, 3, 24, 32, seed=1), seeded_rand(1, 3, 24, 24, seed=2)
    level = PRESETS[name].stages[-1].levels[-1]
    with torch.no_grad():
        expected = model.decoders[level](model.encoder.encode(content, level)).clamp(0, 1)
    got = model.stylize(content, [style], preset=name, alpha=0.0)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["quality", "realtime"])
def test_a_flat_photo_stays_flat(model, name):
    """No pattern from nowhere (the old realtime laid the style's shuffled fine texture over
    flat regions, a crinkled-paper look): constant features have no covariance to colour."""
    content = torch.full((1, 3, 32, 40), 0.4)
    out = model.stylize(content, [seeded_rand(1, 3, 32, 32, seed=2)], preset=name)
    assert float(out.std(dim=(2, 3)).max()) < 1e-5


def test_the_model_default_preset_is_used_and_described(tiny_networks):
    encoder, decoders = tiny_networks
    default_realtime = StyleTransfer(encoder, decoders, preset="realtime")
    content, style = seeded_rand(1, 3, 24, 32, seed=1), seeded_rand(1, 3, 24, 24, seed=2)
    torch.testing.assert_close(
        default_realtime.stylize(content, [style]),
        default_realtime.stylize(content, [style], preset="realtime"),
    )
    assert default_realtime.describe()["preset"] == "realtime"
    with pytest.raises(ValueError, match="unknown preset"):
        StyleTransfer(encoder, decoders, preset="turbo")


@pytest.mark.parametrize("name", ["quality", "realtime"])
def test_a_full_mask_equals_no_mask(model, name):
    content, style = seeded_rand(1, 3, 24, 32, seed=1), seeded_rand(1, 3, 24, 24, seed=2)
    masked = model.stylize(content, [style], masks=[torch.ones(1, 1, 24, 32)], preset=name)
    plain = model.stylize(content, [style], preset=name)
    torch.testing.assert_close(masked, plain, rtol=1e-4, atol=1e-4)


def test_preserve_color_keeps_the_photo_chroma_mean(model):
    content, style = seeded_rand(1, 3, 24, 32, seed=1), seeded_rand(1, 3, 24, 24, seed=2)
    out = model.stylize(content, [style], preserve_color=True)
    chroma = lambda x: rgb_to_ycbcr(x)[:, 1:].mean(dim=(2, 3))  # noqa: E731
    assert float((chroma(out) - chroma(content)).abs().max()) < 0.05


def test_a_batch_of_different_styles_matches_separate_calls_and_control_drops_rows(model):
    """The service batches requests with different styles: each row keeps its own WCT; an
    image the step control drops leaves the batch, the others are unchanged."""
    contents = seeded_rand(2, 3, 24, 32, seed=7)
    styles = torch.cat([seeded_rand(1, 3, 32, 32, seed=8), seeded_rand(1, 3, 32, 32, seed=9) * 0.3])
    batched = model.stylize(contents, [styles])
    singles = [model.stylize(contents[b : b + 1], [styles[b : b + 1]]) for b in range(2)]
    for b in range(2):
        torch.testing.assert_close(batched[b : b + 1], singles[b], rtol=1e-4, atol=1e-4)
    calls = []

    def control(done, total):
        calls.append((done, total))
        return [1] if done == 2 else None

    kept = model.stylize(contents, [styles], control=control)
    total = PRESETS["quality"].passes
    assert calls == [(done, total) for done in range(total + 1)]
    torch.testing.assert_close(kept, singles[1], rtol=1e-4, atol=1e-4)
    assert model.stylize(contents, [styles], control=lambda d, t: []).shape == (0, 3, 24, 32)


def test_a_model_with_its_own_levels_runs_them_unless_a_preset_is_asked(tiny_networks):
    encoder, decoders = tiny_networks
    content, style = seeded_rand(1, 3, 24, 32, seed=1), seeded_rand(1, 3, 24, 24, seed=2)
    plain = StyleTransfer(encoder, decoders)
    passes = [level for stage in PRESETS["quality"].stages for level in stage.levels]
    assert plain.describe()["levels"] == passes
    single = StyleTransfer(encoder, decoders, levels=("relu3_1",))
    assert single.describe()["mode"] == "single-level"
    torch.testing.assert_close(
        single.stylize(content, [style]), plain.stylize(content, [style], levels=["relu3_1"])
    )
    torch.testing.assert_close(
        single.stylize(content, [style], preset="quality"), plain.stylize(content, [style])
    )


@pytest.mark.parametrize("name", ["quality", "realtime"])
def test_full_size_passes_count_the_pixels_the_passes_run_on(model, name):
    """The model's cost answer is what its passes encode: sum over passes of the image's
    pixels over the photo's (64 x 64: every stage's size divides the encoder's strides).
    Every pass, whole-map or banded, runs the encoder's first layer (the 1x1
    preprocessing) once on the image it encodes."""
    content, style = seeded_rand(1, 3, 64, 64, seed=1), seeded_rand(1, 3, 32, 32, seed=2)
    model.stylize(content, [style], preset=name)  # style statistics cached from here on
    pixels = []
    hook = model.encoder.layers[0].register_forward_pre_hook(
        lambda module, args: pixels.append(args[0].shape[-2] * args[0].shape[-1])
    )
    try:
        model.stylize(content, [style], preset=name)
    finally:
        hook.remove()
    assert len(pixels) == PRESETS[name].passes
    assert model.full_size_passes(name) == sum(pixels) / (64 * 64)


def test_realtime_never_runs_deeper_than_quality_and_levels_count_full_size(tiny_networks):
    """realtime's passes cover no more pixels than quality's, and at every stage its
    deepest level is no deeper (relu3_1 costs ~2x relu2_1 and ~64x relu1_1 per pixel)."""
    encoder, decoders = tiny_networks
    model = StyleTransfer(encoder, decoders)
    assert model.full_size_passes("realtime") <= model.full_size_passes("quality")
    quality, realtime = PRESETS["quality"].stages, PRESETS["realtime"].stages
    for fast, full in zip(realtime, quality, strict=True):
        assert fast.factor == full.factor
        assert max(map(LEVELS.index, fast.levels)) <= max(map(LEVELS.index, full.levels))
    assert model.full_size_passes() == model.full_size_passes("quality")
    three = StyleTransfer(encoder, decoders, levels=("relu3_1", "relu2_1", "relu1_1"))
    assert three.full_size_passes() == 3.0
    assert three.full_size_passes("realtime") == model.full_size_passes("realtime")

"""StyleTransfer on seeded random networks: maths of each feature, shapes, errors."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from models.adain import StyleTransfer
from models.adain.color import luminance, rgb_to_ycbcr, with_chroma_of, ycbcr_to_rgb
from models.adain.options import StyleKeywords, StyleOptions
from models.adain.pipeline import pad_to_multiple
from models.adain.stats import FeatureStats, StyleStatsCache, content_key
from models.adain.transfer import adain_affine, region_labels, transfer
from models.hub import WeightsNotFoundError
from tests.models.seeded import seeded_rand


def _reference_adain(content, mean_s, std_s, eps=1e-5):
    """Float64 AdaIN of (C, N) content towards (C,) statistics."""
    content = content.double()
    mean_c = content.mean(dim=1, keepdim=True)
    var_c = content.var(dim=1, unbiased=False, keepdim=True)
    return (
        std_s.double()[:, None] * (content - mean_c) / torch.sqrt(var_c + eps)
        + mean_s.double()[:, None]
    )


def _stats(features):
    return FeatureStats.of(features)


@pytest.fixture
def model(tiny_networks):
    encoder, decoders = tiny_networks
    return StyleTransfer(encoder, decoders, levels=("relu3_1", "relu2_1", "relu1_1"))


# ---- feature-level maths -------------------------------------------------------------


def test_weighted_styles_interpolate_statistics():
    content, s1, s2 = (seeded_rand(2, 5, 6, 7, seed=i) * (i + 1) for i in range(3))
    out = transfer(content, [_stats(s1), _stats(s2)], weights=[0.25, 0.75])
    for b in range(2):
        mean = 0.25 * s1[b].flatten(1).double().mean(1) + 0.75 * s2[b].flatten(1).double().mean(1)
        std = 0.25 * torch.sqrt(s1[b].flatten(1).double().var(1, unbiased=False) + 1e-5)
        std = std + 0.75 * torch.sqrt(s2[b].flatten(1).double().var(1, unbiased=False) + 1e-5)
        expected = _reference_adain(content[b].flatten(1), mean, std).reshape(5, 6, 7)
        torch.testing.assert_close(out[b].double(), expected, rtol=1e-4, atol=1e-4)


@given(alpha=st.floats(0.0, 1.0))
@settings(max_examples=15, deadline=None)
def test_alpha_interpolates_features(alpha):
    content, style = seeded_rand(1, 4, 5, 5, seed=3), seeded_rand(1, 4, 3, 3, seed=4) * 3
    full = transfer(content, [_stats(style)], weights=[1.0])
    out = transfer(content, [_stats(style)], weights=[1.0], alpha=alpha)
    torch.testing.assert_close(out, alpha * full + (1 - alpha) * content, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_adain_affine_is_transfer_as_a_per_channel_affine(alpha):
    content = seeded_rand(2, 5, 6, 7, seed=8) * 3 - 1
    styles = [_stats(seeded_rand(1, 5, 4, 4, seed=9) * 2), _stats(seeded_rand(2, 5, 3, 5, seed=10))]
    scale, shift = adain_affine(content, styles, weights=[0.4, 0.6], alpha=alpha)
    assert scale.shape == shift.shape == (2, 5)
    expected = transfer(content, styles, weights=[0.4, 0.6], alpha=alpha)
    got = content * scale[:, :, None, None] + shift[:, :, None, None]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_masked_regions_get_their_own_statistics():
    content = seeded_rand(1, 3, 8, 8, seed=5)
    styles = [seeded_rand(1, 3, 4, 4, seed=6) * 4 + 2, seeded_rand(1, 3, 4, 4, seed=7) - 3]
    left = torch.zeros(1, 1, 8, 8)
    left[..., :3] = 1.0  # 3 columns for style 0, the rest for style 1
    labels = region_labels([left, 1 - left], (8, 8), batch=1)
    out = transfer(content, [_stats(s) for s in styles], weights=[0.5, 0.5], labels=labels)
    for k, region in enumerate([labels[0] == 0, labels[0] == 1]):
        s = styles[k][0].flatten(1)
        mean, std = s.double().mean(1), torch.sqrt(s.double().var(1, unbiased=False) + 1e-5)
        expected = _reference_adain(content[0][:, region], mean, std)
        torch.testing.assert_close(out[0][:, region].double(), expected, rtol=1e-4, atol=1e-4)


def test_region_labels_follow_the_largest_mask_and_leave_gaps():
    a = torch.zeros(1, 1, 4, 8)
    b = torch.zeros(1, 1, 4, 8)
    a[..., :4], b[..., 4:6] = 1.0, 0.8
    labels = region_labels([a, b], (4, 8), batch=2)
    assert labels.shape == (2, 4, 8)
    assert (labels[:, :, :4] == 0).all() and (labels[:, :, 4:6] == 1).all()
    assert (labels[:, :, 6:] == -1).all()


# ---- the pipeline ----------------------------------------------------------------------


@pytest.mark.parametrize("size", [(19, 26), (8, 8), (5, 3)])
def test_any_size_gives_the_same_size_in_range(model, size):
    out = model.stylize(seeded_rand(2, 3, *size, seed=1), [seeded_rand(1, 3, 16, 18, seed=2)])
    assert out.shape == (2, 3, *size) and out.dtype == torch.float32
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0


def test_pad_then_crop_round_trips():
    image = seeded_rand(1, 3, 13, 7, seed=0)
    padded, (h, w) = pad_to_multiple(image, 4)
    assert padded.shape[-2:] == (16, 8)
    assert torch.equal(padded[..., :h, :w], image)
    tiny, _ = pad_to_multiple(image[..., :3, :3], 4)
    assert tiny.shape[-2:] == (8, 8)


def test_same_input_same_output(model):
    content, style = seeded_rand(1, 3, 16, 16, seed=1), seeded_rand(1, 3, 16, 16, seed=2)
    first = model.stylize(content, [style])
    model.cache.clear()
    assert torch.equal(first, model.stylize(content, [style]))


def test_alpha_zero_single_level_is_plain_reconstruction(model):
    content = seeded_rand(1, 3, 16, 20, seed=1)
    out = model.stylize(content, [seeded_rand(1, 3, 16, 16, seed=2)], alpha=0.0, levels=["relu3_1"])
    with torch.no_grad():
        expected = model.decoders["relu3_1"](model.encoder.encode(content, "relu3_1")).clamp(0, 1)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_single_level_matches_adain_on_style_features(model):
    content, style = seeded_rand(1, 3, 16, 16, seed=3), seeded_rand(1, 3, 16, 20, seed=4)
    out = model.stylize(content, [style], levels=["relu2_1"])
    from norms.functional import adain

    with torch.no_grad():
        target = adain(
            model.encoder.encode(content, "relu2_1"), model.encoder.encode(style, "relu2_1")
        )
        expected = model.decoders["relu2_1"](target).clamp(0, 1)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_one_hot_weights_equal_the_single_style(model):
    content = seeded_rand(1, 3, 16, 16, seed=1)
    s1, s2 = seeded_rand(1, 3, 16, 16, seed=2), seeded_rand(1, 3, 16, 16, seed=3)
    torch.testing.assert_close(
        model.stylize(content, [s1, s2], style_weights=[3.0, 0.0]), model.stylize(content, [s1])
    )


def test_huge_weights_are_normalised_without_overflow(model):
    """1e308 + 1e308 is inf in float: the weights are scaled by their maximum first."""
    content = seeded_rand(1, 3, 16, 16, seed=1)
    s1, s2 = seeded_rand(1, 3, 16, 16, seed=2), seeded_rand(1, 3, 16, 16, seed=3)
    torch.testing.assert_close(
        model.stylize(content, [s1, s2], style_weights=[1e308, 1e308]),
        model.stylize(content, [s1, s2], style_weights=[1.0, 1.0]),
    )


def test_per_item_styles_in_one_batch_match_separate_calls(model):
    contents = seeded_rand(2, 3, 16, 16, seed=1)
    styles = seeded_rand(2, 3, 16, 16, seed=2)
    batched = model.stylize(contents, [styles])
    for b in range(2):
        single = model.stylize(contents[b : b + 1], [styles[b : b + 1]])
        torch.testing.assert_close(batched[b : b + 1], single, rtol=1e-4, atol=1e-5)


def test_full_mask_equals_unmasked(model):
    content, style = seeded_rand(1, 3, 16, 16, seed=1), seeded_rand(1, 3, 16, 16, seed=2)
    masked = model.stylize(content, [style], masks=[torch.ones(1, 1, 16, 16)])
    torch.testing.assert_close(masked, model.stylize(content, [style]), rtol=1e-4, atol=1e-5)


def test_style_statistics_are_cached_by_content(model):
    content, style = seeded_rand(1, 3, 16, 16, seed=1), seeded_rand(1, 3, 16, 16, seed=2)
    model.stylize(content, [style])
    misses = model.cache.misses
    model.stylize(content, [style.clone()])  # a new tensor with the same pixels
    assert model.cache.misses == misses and model.cache.hits >= 3
    model.stylize(content, [style + 0.01])
    assert model.cache.misses == misses + 3


def test_cache_is_bounded_and_keyed_by_bytes():
    cache = StyleStatsCache(capacity=2)
    calls = []

    def compute(image, levels):
        calls.append(tuple(levels))
        return {
            level: FeatureStats(image.mean()[None, None], image.std()[None, None])
            for level in levels
        }

    a, b = torch.zeros(1, 3, 2, 2), torch.ones(1, 3, 2, 2)
    assert content_key(a) == content_key(a.clone()) != content_key(b)
    cache.get_or_compute(a, ["x", "y"], "m", compute)
    cache.get_or_compute(a, ["x", "y", "z"], "m", compute)
    assert calls == [("x", "y"), ("z",)] and len(cache) == 2
    cache.get_or_compute(a, ["x"], "other-mode", compute)
    assert calls[-1] == ("x",)
    with pytest.raises(ValueError):
        StyleStatsCache(-1)


def test_describe(model):
    info = model.describe()
    assert info["mode"] == "multi-level" and info["levels"] == ["relu3_1", "relu2_1", "relu1_1"]
    assert info["device"] == "cpu"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"style_weights": [1.0, 2.0]}, "style weights"),
        ({"style_weights": [-1.0]}, ">= 0"),
        ({"style_weights": [float("nan")]}, "finite"),
        ({"alpha": 1.5}, "alpha"),
        ({"alpha": -0.1}, "alpha"),
        ({"masks": [torch.ones(1, 1, 16, 16)] * 2}, "masks"),
        ({"masks": [torch.ones(1, 1, 8, 8)]}, "mask 0"),
        ({"masks": [torch.ones(1, 1, 16, 16)], "style_weights": [1.0]}, "cannot be combined"),
        ({"levels": ["relu4_1"]}, "no decoder"),
        ({"levels": ["conv9"]}, "unknown feature level"),
    ],
)
def test_bad_arguments(model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        model.stylize(
            seeded_rand(1, 3, 16, 16, seed=1), [seeded_rand(1, 3, 16, 16, seed=2)], **kwargs
        )


def test_bad_shapes(model):
    content = seeded_rand(2, 3, 16, 16, seed=1)
    with pytest.raises(ValueError, match="content"):
        model.stylize(content[:, :2], [content])
    with pytest.raises(ValueError, match="style 0"):
        model.stylize(content, [seeded_rand(3, 3, 16, 16, seed=2)])
    with pytest.raises(ValueError, match="at least 16 px"):
        model.stylize(content, [seeded_rand(1, 3, 8, 32, seed=2)])
    with pytest.raises(ValueError, match="at least one style"):
        model.stylize(content, [])


def test_style_keywords_are_the_options_fields(model):
    """The keywords ``stylize`` takes are :class:`StyleOptions`' fields, and no others."""
    assert list(StyleKeywords.__annotations__) == [f.name for f in fields(StyleOptions)]
    content = seeded_rand(1, 3, 16, 16, seed=1)
    with pytest.raises(TypeError, match="strength"):
        model.stylize(content, [content], strength=0.5)


def test_fast_path_agrees_with_float32(tiny_networks):
    encoder, decoders = tiny_networks
    plain = StyleTransfer(encoder, decoders, levels=("relu3_1",))
    fast = StyleTransfer(encoder, decoders, levels=("relu3_1",), fast=True)
    content, style = seeded_rand(1, 3, 24, 24, seed=1), seeded_rand(1, 3, 24, 24, seed=2)
    a, b = plain.stylize(content, [style]), fast.stylize(content, [style])
    assert float((a - b).abs().mean()) < 0.02


def test_missing_weights_raise_a_clear_error(tmp_path):
    with pytest.raises(WeightsNotFoundError, match="atelier weights fetch vgg19-normalised"):
        StyleTransfer.from_pretrained([tmp_path])


# ---- colour preservation -----------------------------------------------------------


def test_ycbcr_matches_pillow():
    rng = np.random.default_rng(0)
    array = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
    pillow = np.asarray(Image.fromarray(array).convert("YCbCr"), dtype=np.float64)
    ours = rgb_to_ycbcr(torch.from_numpy(array).permute(2, 0, 1)[None].double() / 255)
    np.testing.assert_allclose(ours[0].permute(1, 2, 0).numpy() * 255, pillow, atol=1.0)
    rgb = torch.rand(2, 3, 4, 4, dtype=torch.float64)
    torch.testing.assert_close(ycbcr_to_rgb(rgb_to_ycbcr(rgb)), rgb)


def test_chroma_comes_from_the_content():
    # mid-range luma and mild chroma stay inside the RGB gamut, so nothing is clamped
    stylised = seeded_rand(1, 3, 8, 8, seed=1) * 0.4 + 0.3
    content = seeded_rand(1, 3, 8, 8, seed=2) * 0.2 + 0.4
    out = with_chroma_of(stylised, content)
    torch.testing.assert_close(
        rgb_to_ycbcr(out)[:, 1:], rgb_to_ycbcr(content)[:, 1:], atol=1e-5, rtol=0
    )
    torch.testing.assert_close(
        rgb_to_ycbcr(out)[:, :1], rgb_to_ycbcr(stylised)[:, :1], atol=1e-5, rtol=0
    )
    grey = luminance(content)
    assert torch.equal(grey[:, 0], grey[:, 1]) and torch.equal(grey[:, 1], grey[:, 2])


def test_preserve_color_is_luminance_transfer_with_content_chroma(model):
    """Luminance-only transfer: grey content and styles stylised, then the content's chroma.

    (The 3/255 mean-chroma target is checked on real photos in test_adain_quality.py;
    random decoders saturate, and clamping then moves chroma.)"""
    content = seeded_rand(1, 3, 16, 16, seed=1) * 0.5 + 0.25
    style = torch.zeros(1, 3, 16, 16)
    style[:, 0] = 1.0  # pure red painting
    out = model.stylize(content, [style], preserve_color=True)
    grey = model.stylize(luminance(content).contiguous(), [luminance(style).contiguous()])
    torch.testing.assert_close(out, with_chroma_of(grey, content))


def test_alpha_zero_multi_level_reconstructs_with_the_last_decoder(model):
    """alpha blends to the photo's own features at every pass, so alpha = 0 is the last
    level's reconstruction of the photo (no chain of reconstruction errors)."""
    content = seeded_rand(1, 3, 16, 16, seed=1)
    out = model.stylize(content, [seeded_rand(1, 3, 16, 16, seed=2)], alpha=0.0)
    with torch.no_grad():
        expected = model.decoders["relu1_1"](model.encoder.encode(content, "relu1_1")).clamp(0, 1)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_from_pretrained_adds_the_adain_relu4_1_pair_when_present(tmp_path):
    """Synthetic files in the published layouts: the WCT trio, then the AdaIN release pair."""
    from models.adain.pipeline import (
        ADAIN_DECODER_FILE,
        ADAIN_ENCODER_FILE,
        DECODER_FILES,
        ENCODER_FILE,
    )
    from models.decoder import Decoder
    from models.vgg import VGGEncoder

    def published(module):
        return {k.removeprefix("layers."): v for k, v in module.state_dict().items()}

    torch.manual_seed(0)
    deep = VGGEncoder("relu4_1")
    (tmp_path / "vgg19-normalised").mkdir()
    torch.save(
        {k: v for k, v in published(deep).items() if int(k.split(".")[0]) <= 17},
        tmp_path / ENCODER_FILE,
    )
    for level, name in DECODER_FILES.items():
        torch.save(published(Decoder(level)), tmp_path / name)
    # the fast path by default, as the service and the command line run it
    assert StyleTransfer.from_pretrained([tmp_path]).describe()["fast"] is True
    without = StyleTransfer.from_pretrained([tmp_path], fast=False)  # float32: encoders compared
    assert without.encoder.depth == "relu3_1" and "relu4_1" not in without.decoders
    assert without.fast is False

    (tmp_path / "adain").mkdir()
    extra = {"32.weight": torch.zeros(512, 512, 3, 3), "32.bias": torch.zeros(512)}  # relu4_2
    torch.save({**published(deep), **extra}, tmp_path / ADAIN_ENCODER_FILE)
    torch.save(published(Decoder("relu4_1")), tmp_path / ADAIN_DECODER_FILE)
    model = StyleTransfer.from_pretrained([tmp_path], fast=False)
    assert model.encoder.depth == "relu4_1"
    assert str(tmp_path / ADAIN_DECODER_FILE) in model.describe()["weight_files"]
    content = seeded_rand(1, 3, 20, 28, seed=1)
    out = model.stylize(content, [seeded_rand(1, 3, 16, 16, seed=2)], levels=["relu4_1"])
    assert out.shape == content.shape
    # the relu3_1 features are unchanged: the deeper file starts with the same tensors
    torch.testing.assert_close(
        model.encoder.encode(content, "relu3_1"), without.encoder.encode(content, "relu3_1")
    )


def test_a_given_key_replaces_the_hash_of_the_image():
    cache = StyleStatsCache(capacity=4)
    calls = []

    def compute(image, levels):
        calls.append(float(image.mean()))
        return {
            level: FeatureStats(image.mean()[None, None], image.std()[None, None])
            for level in levels
        }

    a, b = torch.zeros(1, 3, 2, 2), torch.ones(1, 3, 2, 2)
    cache.get_or_compute(a, ["x"], "m", compute, key="host-copy|scale=0.5")
    found = cache.get_or_compute(b, ["x"], "m", compute, key="host-copy|scale=0.5")
    assert calls == [0.0] and float(found["x"].mean) == 0.0  # the key decides, not the bytes


def test_a_model_on_a_gpu_keys_styles_by_their_host_copy(model, monkeypatch):
    style = seeded_rand(1, 3, 16, 16, seed=2)
    assert model._host_key(style, "scale=1.0") is None  # on the CPU: hash what is computed on
    monkeypatch.setattr(StyleTransfer, "device", property(lambda self: torch.device("cuda")))
    assert model._host_key(style, "scale=0.5") == f"{content_key(style)}|scale=0.5"
    assert model._host_key(style, "scale=0.5") != model._host_key(style, "scale=1.0")


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_stylize_reads_nothing_back_per_pass(model, alpha):
    # a GPU would wait at every host read: the count must not grow with the passes
    from models.devices import HostReads

    content, style = seeded_rand(2, 3, 24, 32, seed=1), seeded_rand(1, 3, 16, 16, seed=2)
    counts = []
    for levels in (("relu3_1",), ("relu3_1", "relu2_1", "relu1_1")):
        model.cache.clear()
        with HostReads() as reads:
            model.stylize(content, [style], levels=levels, alpha=alpha)
        counts.append(reads.count)
    assert counts[0] == counts[1], counts


def test_warm_up_stylises_once_per_preset(model, monkeypatch):
    from models.adain.presets import PRESETS

    calls = []
    original = model.stylize
    monkeypatch.setattr(
        model, "stylize", lambda *a, **k: calls.append(k["preset"]) or original(*a, **k)
    )
    assert model.warm_up() > 0
    assert calls == list(PRESETS)


@pytest.mark.parametrize("levels", [("relu3_1",), ("relu3_1", "relu2_1", "relu1_1")])
def test_with_alpha_below_one_the_photo_is_encoded_once_per_level(model, levels):
    """The anchors (the photo's features at every level) also serve the first pass, which
    starts from the photo: one encoder run per level, and the output is the two-encode
    computation's, bit for bit."""
    # a style as large as the photo is used as it is (no resizing in the reference)
    content, style = seeded_rand(1, 3, 16, 20, seed=1), seeded_rand(1, 3, 20, 16, seed=2)
    out = model.stylize(content, [style], alpha=0.5, levels=levels)  # caches the style
    runs = []
    hook = model.encoder.register_forward_pre_hook(lambda module, args: runs.append(1))
    try:
        again = model.stylize(content, [style], alpha=0.5, levels=levels)
    finally:
        hook.remove()
    assert len(runs) == len(levels)
    assert torch.equal(again, out)
    with torch.no_grad():
        image = content
        for level in levels:
            stats = [FeatureStats.of(model.encoder.encode(style, level))]
            anchor = model.encoder.encode(content, level)
            features = model.encoder.encode(image, level)
            restyled = transfer(features, stats, weights=[1.0], alpha=0.5, anchor=anchor)
            image = model.decoders[level](restyled)
    torch.testing.assert_close(out, image.clamp(0, 1), rtol=0, atol=0)

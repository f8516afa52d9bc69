"""Whitening and colouring (norms.F.whitening_coloring and WhiteningColoring) against
float64 references written out here, its properties, fast path and error paths."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import norms
from norms import functional as F  # noqa: N812


def _features(batch, channels, height, width, seed, *, rank=None):
    gen = torch.Generator().manual_seed(seed)
    mixing = torch.randn(channels, rank or channels, generator=gen, dtype=torch.float64)
    base = torch.randn(batch, rank or channels, height * width, generator=gen, dtype=torch.float64)
    shift = torch.randn(batch, channels, 1, generator=gen, dtype=torch.float64)
    return (mixing @ base + shift).view(batch, channels, height, width)


def _reference_stats(x):
    """Mean and covariance by an explicit sum over positions, in float64."""
    flat = x.double().flatten(2)  # (B, C, n)
    mean = flat.sum(dim=2) / flat.shape[2]
    centred = flat - mean[..., None]
    covariance = torch.einsum("bip,bjp->bij", centred, centred) / flat.shape[2]
    return mean, covariance


def _reference_power(matrix, power, floor=F.EIGEN_FLOOR):
    values, vectors = torch.linalg.eigh(matrix.double())
    powered = torch.where(values > floor, values.clamp_min(floor) ** power, 0.0)
    return vectors @ torch.diag_embed(powered) @ vectors.transpose(-1, -2)


def test_covariance_and_powers_match_the_float64_references():
    x = _features(2, 6, 9, 11, seed=0)
    mean, covariance = F.feature_covariance(x)
    ref_mean, ref_cov = _reference_stats(x)
    torch.testing.assert_close(mean, ref_mean)
    torch.testing.assert_close(covariance, ref_cov)
    root = F.symmetric_power(covariance, 0.5)
    torch.testing.assert_close(root @ root, covariance, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(F.symmetric_power(covariance, -0.5), _reference_power(ref_cov, -0.5))


@pytest.mark.parametrize("style_batch", [1, 3])
def test_the_output_takes_the_styles_mean_and_covariance(style_batch):
    content = _features(3, 5, 12, 10, seed=1)
    style = _features(style_batch, 5, 8, 7, seed=2)
    out = F.whitening_coloring(content, style)
    mean, covariance = _reference_stats(out)
    style_mean, style_cov = _reference_stats(style)
    torch.testing.assert_close(mean, style_mean.expand_as(mean), atol=1e-8, rtol=1e-8)
    torch.testing.assert_close(covariance, style_cov.expand_as(covariance), atol=1e-8, rtol=1e-7)


def test_alpha_zero_is_the_content_and_alpha_blends_linearly():
    content, style = _features(2, 4, 6, 6, seed=3), _features(1, 4, 5, 5, seed=4)
    torch.testing.assert_close(F.whitening_coloring(content, style, alpha=0.0), content)
    full = F.whitening_coloring(content, style)
    half = F.whitening_coloring(content, style, alpha=0.5)
    torch.testing.assert_close(half, 0.5 * content + 0.5 * full)


def test_the_style_onto_itself_is_the_identity_for_full_rank_features():
    x = _features(2, 5, 10, 10, seed=5)
    torch.testing.assert_close(F.whitening_coloring(x, x), x)


def _white(seed):
    """Features with zero mean and identity covariance exactly (whitened in float64)."""
    x = _features(1, 3, 20, 20, seed=seed)
    mean, covariance = _reference_stats(x)
    flat = _reference_power(covariance, -0.5) @ (x.flatten(2) - mean[..., None])
    return flat.view_as(x)


def test_diagonal_covariances_make_it_adain():
    """With channels uncorrelated in both, WCT matches each channel's mean and deviation
    alone: it is AdaIN (without its eps)."""
    scale = torch.tensor([2.0, 0.5, 3.0], dtype=torch.float64).view(1, 3, 1, 1)
    content = _white(6) * scale + 1.0
    style = _white(7) * scale.flip(1) - 2.0
    wct = F.whitening_coloring(content, style)
    torch.testing.assert_close(wct, F.adain(content, style, eps=0.0), atol=1e-7, rtol=1e-7)


def test_dead_directions_are_projected_out_not_blown_up():
    content = _features(1, 6, 10, 10, seed=7, rank=3)  # three dead directions
    style = _features(1, 6, 10, 10, seed=8)
    out = F.whitening_coloring(content, style)
    assert torch.isfinite(out).all() and float(out.abs().max()) < 1e3


def test_the_grid_fast_path_reads_every_position_under_its_limit_and_a_grid_above():
    x = _features(1, 4, 30, 40, seed=9)
    exact = F.feature_covariance(x)
    assert F.grid_stride(30, 40, 1200) == 1
    torch.testing.assert_close(F.feature_covariance(x, 1200)[1], exact[1])
    assert F.grid_stride(30, 40, 300) == 2
    gridded = F.feature_covariance(x, 300)
    torch.testing.assert_close(gridded[1], _reference_stats(x[:, :, ::2, ::2])[1])


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]),
    channels_last=st.booleans(),
    offset=st.sampled_from([0.0, 1e3]),
)
def test_low_precision_and_channels_last_accumulate_in_float32(dtype, channels_last, offset):
    x64 = _features(2, 4, 8, 8, seed=10) + offset
    x = x64.to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    mean, covariance = F.feature_covariance(x)
    ref_mean, ref_cov = _reference_stats(x.double())  # the same rounded inputs
    assert mean.dtype == covariance.dtype == torch.float64
    torch.testing.assert_close(mean, ref_mean, atol=1e-3 * (1 + offset), rtol=1e-5)
    torch.testing.assert_close(covariance, ref_cov, atol=1e-3, rtol=1e-4)


def test_the_module_is_registered_and_checks_its_arguments():
    module = norms.build("whitening_coloring", 4, alpha=0.5)
    assert isinstance(module, norms.WhiteningColoring) and "4" in module.extra_repr()
    content, style = _features(2, 4, 6, 6, seed=11), _features(1, 4, 6, 6, seed=12)
    torch.testing.assert_close(module(content, style), F.whitening_coloring(content, style, 0.5))
    for bad in ({"alpha": 1.5}, {"floor": -1.0}, {"max_positions": 0}):
        with pytest.raises(ValueError):
            norms.WhiteningColoring(4, **bad)
    with pytest.raises(ValueError, match="channels"):
        module(_features(1, 3, 4, 4, seed=13), style)


def test_bad_inputs_are_refused_with_their_shapes():
    content = _features(2, 4, 5, 5, seed=14)
    with pytest.raises(ValueError, match="style batch"):
        F.whitening_coloring(content, _features(3, 4, 5, 5, seed=15))
    with pytest.raises(ValueError, match="expected"):
        F.whitening_coloring(content, _features(1, 3, 5, 5, seed=16))
    with pytest.raises(ValueError, match="square"):
        F.symmetric_power(torch.ones(3, 4), 0.5)
    with pytest.raises(ValueError, match="alpha"):
        F.whitening_coloring(content, content, alpha=-0.1)

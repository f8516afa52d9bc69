"""WCT on feature maps against float64 references: covariance, matrix powers, the transform."""

from __future__ import annotations

import pytest
import torch

from models.adain.whitening import (
    CovarianceStats,
    apply_affine,
    feature_covariance,
    symmetric_power,
    wct_affine,
    wct_transfer,
)

pytestmark = pytest.mark.usefixtures("single_thread")


def _features(*shape, seed, mix=True):
    """Correlated feature maps: random channels mixed by a random matrix, plus an offset."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    if mix:
        mixing = torch.randn(shape[1], shape[1], generator=gen, dtype=torch.float64)
        x = torch.einsum("jc,bchw->bjhw", mixing, x)
    return x + torch.randn(1, shape[1], 1, 1, generator=gen, dtype=torch.float64)


def test_feature_covariance_matches_torch_cov():
    features = _features(2, 5, 6, 7, seed=1).float()
    mean, covariance = feature_covariance(features)
    for b in range(2):
        flat = features[b].double().flatten(1)
        torch.testing.assert_close(mean[b], flat.mean(dim=1), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(
            covariance[b], torch.cov(flat, correction=0), rtol=1e-5, atol=1e-5
        )


def test_a_large_map_is_read_on_a_regular_grid():
    """Past ``max_positions`` the statistics are those of the positions ``(s i, s j)``,
    ``s = ceil(sqrt(HW / max_positions))``; a channels-last map gives the same."""
    features = _features(2, 5, 13, 11, seed=8).float()  # 143 positions
    for max_positions, stride in ((143, 1), (142, 2), (40, 2), (35, 3), (10, 4)):
        grid = features[..., ::stride, ::stride].double().flatten(2)
        for layout in (torch.contiguous_format, torch.channels_last):
            mean, covariance = feature_covariance(
                features.contiguous(memory_format=layout), max_positions
            )
            for b in range(2):
                torch.testing.assert_close(mean[b], grid[b].mean(dim=1), rtol=1e-6, atol=1e-6)
                torch.testing.assert_close(
                    covariance[b], torch.cov(grid[b], correction=0), rtol=1e-5, atol=1e-5
                )


@pytest.mark.parametrize("max_positions", [1_000, 40])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "positions", "float64"])
def test_the_covariance_reads_features_without_changing_them_unless_scratch(layout, max_positions):
    """Centring in place is the covariance's own copy's business: the caller's features
    come back unchanged (a view of them is never centred), and ``scratch=True`` (the
    caller's scratch map, overwritten) gives the same statistics."""
    features = _features(2, 5, 13, 11, seed=10).float()
    if layout == "channels_last":
        features = features.contiguous(memory_format=torch.channels_last)
    elif layout == "positions":
        features = features.flatten(2)
    elif layout == "float64":
        features = features.double()
    before = features.clone()
    mean, covariance = feature_covariance(features, max_positions)
    assert torch.equal(features, before)
    scratch_mean, scratch_covariance = feature_covariance(features, max_positions, scratch=True)
    torch.testing.assert_close(scratch_mean, mean, rtol=0, atol=0)
    torch.testing.assert_close(scratch_covariance, covariance, rtol=0, atol=0)


def test_the_grid_estimate_is_exact_on_a_map_constant_over_its_cells():
    """A map repeated over ``s x s`` cells has the statistics of the grid it is read on."""
    small = _features(1, 4, 8, 6, seed=9)
    large = small.repeat_interleave(3, dim=2).repeat_interleave(3, dim=3)  # 24 x 18
    full_mean, full_covariance = feature_covariance(large, max_positions=24 * 18)
    mean, covariance = feature_covariance(large, max_positions=24 * 18 // 9)
    torch.testing.assert_close(mean, full_mean, rtol=0, atol=1e-12)
    torch.testing.assert_close(covariance, full_covariance, rtol=0, atol=1e-12)


def test_positions_given_as_a_list_are_all_used():
    features = _features(1, 3, 10, 10, seed=10).flatten(2)  # (1, 3, 100)
    _, covariance = feature_covariance(features, max_positions=4)
    torch.testing.assert_close(
        covariance[0], torch.cov(features[0], correction=0), atol=1e-12, rtol=0
    )


def test_symmetric_powers_invert_each_other_and_drop_null_directions():
    gen = torch.Generator().manual_seed(2)
    basis = torch.linalg.qr(torch.randn(4, 4, generator=gen, dtype=torch.float64))[0]
    values = torch.tensor([4.0, 1.0, 0.25, 0.0], dtype=torch.float64)
    matrix = basis @ torch.diag(values) @ basis.T
    root = symmetric_power(matrix, 0.5)
    torch.testing.assert_close(root @ root, matrix, rtol=0, atol=1e-12)
    inverse_root = symmetric_power(matrix, -0.5)
    projector = basis[:, :3] @ basis[:, :3].T  # the null direction is dropped, not blown up
    torch.testing.assert_close(inverse_root @ matrix @ inverse_root, projector, atol=1e-12, rtol=0)


def test_wct_gives_the_style_mean_and_covariance():
    content = _features(2, 4, 9, 8, seed=3)
    style_features = _features(1, 4, 7, 7, seed=4)
    style = CovarianceStats.of(style_features)
    out = wct_transfer(content, [style], weights=[1.0])
    style_mean, style_covariance = feature_covariance(style_features)
    mean, covariance = feature_covariance(out)
    torch.testing.assert_close(mean, style_mean.expand(2, -1), rtol=0, atol=1e-10)
    torch.testing.assert_close(covariance, style_covariance.expand(2, -1, -1), rtol=0, atol=1e-10)


def test_wct_affine_is_the_transform_blended_by_alpha_and_mixes_styles_linearly():
    content = _features(2, 4, 6, 5, seed=5)
    styles = [CovarianceStats.of(_features(1, 4, 6, 6, seed=s)) for s in (6, 7)]
    # reference: S_s^(1/2) S_c^(-1/2) (c - mu_c) + mu_s per style, mixed, then blended
    mean, covariance = feature_covariance(content)
    whitened = torch.einsum(
        "bjc,bchw->bjhw", symmetric_power(covariance, -0.5), content - mean[:, :, None, None]
    )

    def wct_of(style):
        coloured = torch.einsum("jc,bchw->bjhw", style.root[0], whitened)
        return coloured + style.mean[0][None, :, None, None]

    mixed = 0.7 * wct_of(styles[0]) + 0.3 * wct_of(styles[1])
    for alpha in (1.0, 0.4, 0.0):
        matrix, shift = wct_affine(content, styles, weights=[0.7, 0.3], alpha=alpha)
        expected = torch.lerp(content, mixed, alpha)
        torch.testing.assert_close(
            apply_affine(content, matrix, shift), expected, atol=1e-10, rtol=0
        )
        got = wct_transfer(content, styles, weights=[0.7, 0.3], alpha=alpha)
        torch.testing.assert_close(got, expected, atol=1e-10, rtol=0)
    anchor = _features(2, 4, 6, 5, seed=8)
    got = wct_transfer(content, styles, weights=[0.7, 0.3], alpha=0.25, anchor=anchor)
    torch.testing.assert_close(got, torch.lerp(anchor, mixed, 0.25), atol=1e-10, rtol=0)


def test_wct_regions_take_their_own_style_and_unlabelled_pixels_stay():
    content = _features(1, 3, 8, 10, seed=9)
    styles = [CovarianceStats.of(_features(1, 3, 6, 6, seed=s)) for s in (10, 11)]
    labels = torch.full((1, 8, 10), -1)
    labels[:, :, :4], labels[:, :, 6:] = 0, 1
    out = wct_transfer(content, styles, weights=[0.5, 0.5], labels=labels)
    torch.testing.assert_close(out[..., 4:6], content[..., 4:6], rtol=0, atol=0)
    for k, columns in ((0, slice(0, 4)), (1, slice(6, 10))):
        region = out[..., columns]
        expected = wct_transfer(content[..., columns], [styles[k]], weights=[1.0])
        torch.testing.assert_close(region, expected, rtol=0, atol=1e-10)
    # one label everywhere is the unmasked transform
    everywhere = wct_transfer(
        content, styles[:1], weights=[1.0], labels=torch.zeros(1, 8, 10, dtype=torch.long)
    )
    torch.testing.assert_close(
        everywhere, wct_transfer(content, styles[:1], weights=[1.0]), rtol=0, atol=1e-10
    )


def test_a_flat_content_takes_the_style_mean_and_nothing_else():
    """Constant features have no covariance: WCT adds no pattern, only the style's mean."""
    content = torch.full((1, 4, 5, 6), 0.3, dtype=torch.float64)
    style = CovarianceStats.of(_features(1, 4, 6, 6, seed=12))
    out = wct_transfer(content, [style], weights=[1.0])
    torch.testing.assert_close(out, style.mean[:, :, None, None].expand_as(out), rtol=0, atol=1e-12)

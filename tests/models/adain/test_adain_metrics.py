"""Quality measures: the Gram style loss at several scales against float64 references."""

from __future__ import annotations

import pytest
import torch

from models.adain.metrics import (
    GRAM_SCALES,
    downscale,
    gram,
    gram_matrices,
    gram_style_loss,
    gram_style_ratio,
)
from tests.models.seeded import seeded_rand

pytestmark = pytest.mark.usefixtures("single_thread")


def test_gram_against_a_float64_loop():
    features = seeded_rand(2, 4, 5, 6, seed=1)
    expected = torch.zeros(2, 4, 4, dtype=torch.float64)
    f = features.double().flatten(2)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                expected[b, i, j] = sum(f[b, i, p] * f[b, j, p] for p in range(30)) / 30
    torch.testing.assert_close(gram(features).double(), expected, rtol=1e-6, atol=1e-7)


def test_downscale_averages_blocks_and_drops_a_partial_edge():
    image = seeded_rand(1, 3, 9, 8, seed=2)
    half = downscale(image, 2)
    assert half.shape == (1, 3, 4, 4)
    torch.testing.assert_close(half[0, :, 1, 2], image[0, :, 2:4, 4:6].mean(dim=(1, 2)))
    assert downscale(image, 1) is image


@pytest.mark.parametrize("scale", GRAM_SCALES)
def test_gram_style_loss_sums_the_levels_mean_squared_differences(tiny_networks, scale):
    encoder, _ = tiny_networks
    output, style = seeded_rand(2, 3, 32, 40, seed=3), seeded_rand(1, 3, 24, 24, seed=4)
    ours, theirs = (
        gram_matrices(encoder, output, scale=scale),
        gram_matrices(encoder, style, scale=scale),
    )
    with torch.no_grad():
        out_features = encoder(downscale(output, scale).double().float())
    for level, matrix in ours.items():
        flat = out_features[level].double().flatten(2)
        torch.testing.assert_close(
            matrix.double(), flat @ flat.transpose(1, 2) / flat.shape[-1], rtol=1e-5, atol=1e-6
        )
    expected = sum(((ours[lv] - theirs[lv]) ** 2).mean(dim=(1, 2)) for lv in ours)
    torch.testing.assert_close(gram_style_loss(encoder, output, style, scale=scale), expected)
    # the style itself has no loss, and the ratio of the photo to itself is 1
    assert float(gram_style_loss(encoder, style, style, scale=scale)[0]) == 0.0
    ratio = gram_style_ratio(encoder, output[:1], output[:1], style, scale=scale)
    torch.testing.assert_close(ratio, torch.ones(1))

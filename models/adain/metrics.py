"""Quality measures for style transfer, shared by the tests and the benchmarks.

- :func:`style_loss`: sum over relu1_1, relu2_1, relu3_1 of
  ``MSE(mu(out), mu(style)) + MSE(sigma(out), sigma(style))`` over channels, with
  per-channel means and standard deviations of the encoder features (the AdaIN paper's
  style loss with MSE instead of the L2 norm).
- :func:`style_loss_ratio`: the output's style loss over the unstyled photo's.
- :func:`content_loss`: MSE between features at one level (the paper's content loss).
- :func:`psnr`: peak signal-to-noise ratio for images in [0, 1].
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from models.adain.stats import FeatureStats
from models.vgg import VGGEncoder

STYLE_LEVELS: tuple[str, ...] = ("relu1_1", "relu2_1", "relu3_1")


def stats_distance(a: FeatureStats, b: FeatureStats) -> Tensor:
    """``MSE(mean_a, mean_b) + MSE(std_a, std_b)`` per sample: ``(N,)``."""
    return ((a.mean - b.mean) ** 2).mean(dim=1) + ((a.std - b.std) ** 2).mean(dim=1)


@torch.no_grad()
def style_loss(
    encoder: VGGEncoder, output: Tensor, style: Tensor, levels: Sequence[str] = STYLE_LEVELS
) -> Tensor:
    """Style loss per sample of ``output`` ``(B, 3, H, W)`` against ``style`` ``(1|B, 3, h, w)``."""
    out_features = encoder(output.float(), levels)
    style_features = encoder(style.float(), levels)
    total = torch.zeros(output.shape[0], device=output.device)
    for level in levels:
        target = FeatureStats.of(style_features[level]).expand(output.shape[0])
        total = total + stats_distance(FeatureStats.of(out_features[level]), target)
    return total


def style_loss_ratio(encoder: VGGEncoder, output: Tensor, content: Tensor, style: Tensor) -> Tensor:
    """``style_loss(output) / style_loss(content)``: below 1 means closer to the style."""
    return style_loss(encoder, output, style) / style_loss(encoder, content, style)


@torch.no_grad()
def content_loss(
    encoder: VGGEncoder, output: Tensor, content: Tensor, level: str = "relu3_1"
) -> Tensor:
    """MSE between ``output``'s and ``content``'s features at ``level``, per sample."""
    a = encoder.encode(output.float(), level)
    b = encoder.encode(content.float(), level)
    return ((a - b) ** 2).flatten(1).mean(dim=1)


def psnr(output: Tensor, reference: Tensor) -> Tensor:
    """PSNR in dB per sample for images in [0, 1]: ``10 log10(1 / MSE)``."""
    mse = ((output.double() - reference.double()) ** 2).flatten(1).mean(dim=1)
    return 10.0 * torch.log10(1.0 / mse)

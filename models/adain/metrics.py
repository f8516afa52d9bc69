"""Quality measures for style transfer, shared by the tests and the benchmarks.

- :func:`style_loss`: sum over relu1_1, relu2_1, relu3_1 of
  ``MSE(mu(out), mu(style)) + MSE(sigma(out), sigma(style))`` over channels, with
  per-channel means and standard deviations of the encoder features (the AdaIN paper's
  style loss with MSE instead of the L2 norm).
- :func:`style_loss_ratio`: the output's style loss over the unstyled photo's.
- :func:`gram_style_loss`, :func:`gram_style_ratio`: the same with Gram matrices
  (Gatys et al. 2016), which see the channels' correlations and not only their moments,
  measured after a ``k x k`` average pool of every image (``k`` = 1, 2, 4: full size,
  1/2 and 1/4 scale), where the deepest level sees ``k`` times larger structures.
- :func:`content_loss`: MSE between features at one level (the paper's content loss).
- :func:`psnr`: peak signal-to-noise ratio for images in [0, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

from models.adain.stats import FeatureStats
from models.vgg import VGGEncoder

STYLE_LEVELS: tuple[str, ...] = ("relu1_1", "relu2_1", "relu3_1")
#: The average-pool factors :func:`gram_style_ratio` is reported at: full size, 1/2, 1/4.
GRAM_SCALES: tuple[int, ...] = (1, 2, 4)


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


def gram(features: Tensor) -> Tensor:
    """Gram matrix per sample, normalised by the number of positions:

    .. math:: G_{ij} = \\frac{1}{HW} \\sum_p F_{ip} F_{jp}

    accumulated in float32 (float64 for float64 features).

    Shape:
        - features: ``(B, C, H, W)``; output: ``(B, C, C)``.
    """
    flat = features.flatten(2).to(torch.promote_types(features.dtype, torch.float32))
    return flat @ flat.transpose(1, 2) / flat.shape[-1]


def downscale(image: Tensor, factor: int) -> Tensor:
    """``image`` ``(B, 3, H, W)`` averaged over ``factor x factor`` blocks (a partial last
    row or column of blocks is dropped); ``factor = 1`` returns it unchanged."""
    return image if factor == 1 else F.avg_pool2d(image, factor)


@torch.no_grad()
def gram_matrices(
    encoder: VGGEncoder, image: Tensor, *, scale: int = 1, levels: Sequence[str] = STYLE_LEVELS
) -> dict[str, Tensor]:
    """:func:`gram` of ``image``'s features at each level after a ``scale x scale`` average
    pool (:func:`downscale`): ``{level: (B, C_l, C_l)}``."""
    features = encoder(downscale(image.float(), scale), levels)
    return {level: gram(features[level]) for level in levels}


def gram_distance(a: dict[str, Tensor], b: dict[str, Tensor]) -> Tensor:
    """``sum_l mean((G_l(a) - G_l(b))^2)`` over the levels of ``a``, per sample: ``(B,)``
    (``b`` may have batch 1)."""
    # a sum of tensors (typed ``Tensor | Literal[0]``: the start value of ``sum``)
    return cast(Tensor, sum((a[level] - b[level]).square().flatten(1).mean(dim=1) for level in a))


def gram_style_loss(
    encoder: VGGEncoder,
    output: Tensor,
    style: Tensor,
    *,
    scale: int = 1,
    levels: Sequence[str] = STYLE_LEVELS,
) -> Tensor:
    """Gram style loss per sample of ``output`` against ``style``, both first averaged over
    ``scale x scale`` blocks (:func:`downscale`), with ``D_k`` that pool and ``phi_l`` the
    encoder at level ``l``:

    .. math:: L = \\sum_{l} \\frac{1}{C_l^2} \\big\\lVert G(\\phi_l(D_k y)) - G(\\phi_l(D_k s))
              \\big\\rVert_F^2

    Shape:
        - output: ``(B, 3, H, W)``; style: ``(1 or B, 3, h, w)``; returns ``(B,)``.
    """
    return gram_distance(
        gram_matrices(encoder, output, scale=scale, levels=levels),
        gram_matrices(encoder, style, scale=scale, levels=levels),
    )


def gram_style_ratio(
    encoder: VGGEncoder, output: Tensor, content: Tensor, style: Tensor, *, scale: int = 1
) -> Tensor:
    """``gram_style_loss(output) / gram_style_loss(content)`` at ``scale`` (1 full size, 2
    half, 4 quarter): below 1 means closer to the style at that scale."""
    return gram_style_loss(encoder, output, style, scale=scale) / gram_style_loss(
        encoder, content, style, scale=scale
    )


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

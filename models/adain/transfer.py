"""AdaIN on feature maps: mixed styles, alpha, and per-region statistics under masks.

The normalisation itself is :func:`norms.functional.adain_with_stats` with per-sample
target statistics: normalising content ``c`` per channel and rescaling it by a style's
``(sigma_s, mu_s)`` is exactly AdaIN,

.. math:: \\mathrm{AdaIN}(c, s) = \\sigma_s \\frac{c - \\mu_c}{\\sqrt{\\sigma_c^2 + \\epsilon}} + \\mu_s,

so cached or interpolated statistics can be applied without the style features.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

from models.adain.stats import EPS, FeatureStats, mix
from norms.functional import adain_with_stats, channel_mean_std


def adain_to_stats(content: Tensor, target: FeatureStats) -> Tensor:
    """AdaIN of ``content`` towards given statistics, one row of ``target`` per sample.

    Shape:
        - content: ``(B, C, *spatial)``
        - target.mean, target.std: ``(B, C)`` or ``(1, C)``
        - output: like ``content``.
    """
    device = content.device
    return adain_with_stats(content, target.mean.to(device), target.std.to(device), EPS)


def adain_affine(
    content: Tensor,
    styles: Sequence[FeatureStats],
    *,
    weights: Sequence[float],
    alpha: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """:func:`transfer` without masks or an anchor, as a per-(sample, channel) affine.

    .. math:: \\mathrm{lerp}(c, \\mathrm{AdaIN}(c, s), \\alpha) = a\\,c + t, \\qquad
              a = \\alpha \\frac{\\sigma_s}{\\sqrt{\\sigma_c^2 + \\epsilon}} + 1 - \\alpha,
              \\quad t = \\alpha\\,\\Big(\\mu_s - \\mu_c \\frac{\\sigma_s}{\\sqrt{\\sigma_c^2 + \\epsilon}}\\Big)

    so a decoder can fold it into its first convolution
    (:meth:`models.decoder.Decoder.forward_linear`, as a diagonal map) instead of writing the restyled map.

    Shape:
        - content: ``(B, C, h, w)``; output: ``(scale, shift)``, each ``(B, C)`` in the
          statistics' accumulation dtype (float32, float64 for float64 content).
    """
    batch = content.shape[0]
    target = mix(styles, weights, batch)
    mean, std = channel_mean_std(content, EPS)
    mean, std = mean.flatten(1), std.flatten(1)
    ratio = target.std.to(mean) / std
    scale = alpha * ratio + (1.0 - alpha)
    shift = alpha * (target.mean.to(mean) - mean * ratio)
    return scale, shift


def region_labels(masks: Sequence[Tensor], size: tuple[int, int], batch: int) -> Tensor:
    """Which style owns each feature pixel: the index of the largest mask, or -1.

    Masks are resized to the feature map with area averaging; a pixel belongs to
    the style whose mask is largest there if that value is at least 0.5, else to no
    style (it keeps the content's features).

    Shape:
        - masks: each ``(1 or B, 1, H, W)`` in ``[0, 1]``
        - output: ``(B, h, w)`` integer labels in ``[-1, K)``.
    """
    resized = torch.cat(
        [
            F.interpolate(mask.float(), size=size, mode="area").expand(batch, -1, -1, -1)
            for mask in masks
        ],
        dim=1,
    )  # (B, K, h, w)
    value, index = resized.max(dim=1)
    return torch.where(value >= 0.5, index, torch.full_like(index, -1))


def transfer(
    content: Tensor,
    styles: Sequence[FeatureStats],
    *,
    weights: Sequence[float],
    labels: Tensor | None = None,
    alpha: float = 1.0,
    anchor: Tensor | None = None,
) -> Tensor:
    """Restyle a feature map: AdaIN towards mixed styles, or one style per masked region.

    Args:
        content: content features.
        styles: statistics of each style at this level.
        weights: convex weights over ``styles``
            (:func:`~models.adain.stats.convex_weights`; unused with ``labels``).
        labels: from :func:`region_labels`; each region is normalised with its own
            content statistics and given its style's statistics. Pixels labelled -1
            keep the content features.
        alpha: ``alpha * restyled + (1 - alpha) * anchor``.
        anchor: the features ``alpha`` blends back to (default ``content``); the
            multi-level pass anchors every level to the original photo's features.

    Shape:
        - content, anchor: ``(B, C, h, w)``; labels: ``(B, h, w)``; output: ``(B, C, h, w)``.
    """
    batch = content.shape[0]
    if labels is None:
        restyled = adain_to_stats(content, mix(styles, weights, batch))
    else:
        expanded = [style.expand(batch) for style in styles]

        def restyle(k: int, b: int, pixels: Tensor) -> Tensor:
            row = FeatureStats(expanded[k].mean[b : b + 1], expanded[k].std[b : b + 1])
            return adain_to_stats(pixels, row)[0]

        restyled = restyle_regions(content, labels, len(styles), restyle, min_pixels=1)
    return blend_with_anchor(content, restyled, alpha, anchor)


def restyle_regions(
    content: Tensor,
    labels: Tensor,
    num_styles: int,
    restyle: Callable[[int, int, Tensor], Tensor],
    *,
    min_pixels: int,
) -> Tensor:
    """A copy of ``content`` with each labelled region restyled on its own.

    For each style ``k`` and batch item ``b``, the pixels with ``labels[b] == k`` (at least
    ``min_pixels`` of them, else the region is left as it is) are gathered into
    ``(1, C, N)`` and replaced by ``restyle(k, b, pixels)``, a ``(C, N)`` tensor; pixels
    labelled -1 (or with fewer than ``min_pixels`` of their label) keep the content.
    The region loop of :func:`transfer` and :func:`~models.adain.whitening.wct_transfer`.

    Shape:
        - content: ``(B, C, h, w)``; labels: ``(B, h, w)`` in ``[-1, num_styles)``;
          output: ``(B, C, h, w)``.
    """
    restyled = content.clone()
    for k in range(num_styles):
        for b in range(content.shape[0]):
            region = labels[b] == k  # (h, w)
            if int(region.sum()) < min_pixels:
                continue
            pixels = content[b][:, region][None]  # (1, C, N)
            restyled[b][:, region] = restyle(k, b, pixels)
    return restyled


def blend_with_anchor(
    content: Tensor, restyled: Tensor, alpha: float, anchor: Tensor | None
) -> Tensor:
    """``lerp(anchor, restyled, alpha)`` with ``anchor`` defaulting to ``content``;
    ``restyled`` itself (no copy) when ``alpha == 1``."""
    if alpha == 1.0:
        return restyled
    return torch.lerp(content if anchor is None else anchor, restyled, alpha)

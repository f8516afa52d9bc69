"""Whitening and colouring: the decorrelated member of the family (WCT, Li et al. 2017).

Batch, instance and AdaIN normalise each channel on its own (its mean and deviation);
whitening normalises the channels *jointly*: the features are centred and multiplied by
the inverse square root of their covariance, so the channels come out decorrelated with
unit variance (ZCA whitening, the one closest to the input). Colouring is the inverse
with another covariance: WCT whitens content features and colours them with a style's,

.. math::

    \\mathrm{WCT}(c, s) = S_s^{1/2}\\, S_c^{-1/2}\\, (c - \\mu_c) + \\mu_s

applied at every position, so the output's mean is ``mu_s`` and its covariance ``S_s``
(what a Gram matrix sees: which channels fire together), where AdaIN matches only the
diagonal. With ``S_c = diag(sigma_c^2)`` and ``S_s = diag(sigma_s^2)`` it is AdaIN.

Numerics, per the package's contract: the covariance is accumulated in float32 (or
float64 for float64 features) by the two-pass form, position-major; the matrix powers
are taken on the eigendecomposition in float64, with eigenvalues at or below ``floor``
(dead or constant directions, which ReLU maps have) mapped to 0, so those directions are
projected out rather than blown up. Fast path: a map of more than ``max_positions``
positions is read on a regular grid (:func:`grid_stride`), so the covariance's cost stops
growing with the image.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "EIGEN_FLOOR",
    "feature_covariance",
    "grid_stride",
    "symmetric_power",
    "whitening_coloring",
    "whitening_coloring_affine",
]

#: Eigenvalues of a covariance at or below this are treated as zero.
EIGEN_FLOOR = 1e-5


def grid_stride(height: int, width: int, max_positions: int | None) -> int:
    """The stride ``s = ceil(sqrt(HW / max_positions))`` of the grid a ``(height, width)``
    map's covariance is read on (1: every position, also for ``max_positions=None``)."""
    if max_positions is None:
        return 1
    if max_positions < 1:
        raise ValueError(f"max_positions must be >= 1, got {max_positions}")
    return max(1, math.ceil(math.sqrt(height * width / max_positions)))


def feature_covariance(
    features: Tensor, max_positions: int | None = None, *, scratch: bool = False
) -> tuple[Tensor, Tensor]:
    """Mean and biased covariance of the channels over the positions (two-pass form).

    .. math:: \\mu = \\frac{1}{n} \\sum_p f_p, \\qquad
              S = \\frac{1}{n} \\sum_p (f_p - \\mu)(f_p - \\mu)^\\top

    A ``(H, W)`` map of more than ``max_positions`` positions is read on the grid of
    stride :func:`grid_stride` (the positions ``(s i, s j)``). The products accumulate in
    float32 (float64 for float64 features); the results are float64. ``scratch``: the
    caller does not read ``features`` again, so the positions may be centred in place
    (a copy is centred in place anyway).

    Shape:
        - features: ``(B, C, H, W)``, or ``(B, C, n)`` (every position used).
        - output: ``(B, C)`` and ``(B, C, C)``, float64.
    """
    if features.dim() not in (3, 4):
        raise ValueError(
            f"expected (B, C, H, W) or (B, C, n) features, got {tuple(features.shape)}"
        )
    dtype = torch.promote_types(features.dtype, torch.float32)
    batch, channels = features.shape[:2]
    if features.dim() == 4:
        height, width = features.shape[-2:]
        stride = grid_stride(height, width, max_positions)
        grid = features.permute(0, 2, 3, 1)[:, ::stride, ::stride]  # (B, h, w, C)
        flat = grid.reshape(batch, -1, channels).to(dtype)  # (B, n, C)
    else:
        flat = features.transpose(1, 2).to(dtype)
    if flat.shape[1] < 1:
        raise ValueError("the covariance needs at least one position")
    mean = flat.mean(dim=1, keepdim=True)
    owned = scratch or flat.untyped_storage().data_ptr() != features.untyped_storage().data_ptr()
    centred = flat.sub_(mean) if owned else flat - mean
    covariance = centred.transpose(1, 2) @ centred / flat.shape[1]
    return mean.squeeze(1).double(), covariance.double()


def symmetric_power(matrix: Tensor, power: float, floor: float = EIGEN_FLOOR) -> Tensor:
    """``S^power`` of a symmetric positive semi-definite ``S``: ``E diag(d^power) E^T`` on
    its eigendecomposition in float64, every eigenvalue ``d <= floor`` mapped to 0.

    Shape:
        - matrix: ``(..., C, C)``; output: the same, float64.
    """
    if matrix.dim() < 2 or matrix.shape[-1] != matrix.shape[-2]:
        raise ValueError(f"expected square matrices, got {tuple(matrix.shape)}")
    if floor < 0:
        raise ValueError(f"floor must be >= 0, got {floor}")
    values, vectors = torch.linalg.eigh(matrix.double())
    kept = values > floor
    powered = torch.where(kept, values.clamp_min(floor) ** power, torch.zeros_like(values))
    result: Tensor = (vectors * powered.unsqueeze(-2)) @ vectors.transpose(-1, -2)
    return result


def whitening_coloring_affine(
    content_mean: Tensor,
    content_covariance: Tensor,
    style_mean: Tensor,
    style_root: Tensor,
    alpha: float = 1.0,
    floor: float = EIGEN_FLOOR,
) -> tuple[Tensor, Tensor]:
    """WCT blended with the content by ``alpha`` as one affine map per sample,
    ``lerp(c, WCT(c), alpha) = M c + t`` (what a decoder folds into its first conv):

    .. math:: M = \\alpha R S_c^{-1/2} + (1 - \\alpha) I, \\qquad
              t = \\alpha (\\mu_s - R S_c^{-1/2} \\mu_c)

    with ``R = S_s^{1/2}`` the style's covariance root (several styles: the convex
    combination of their roots and means).

    Shape:
        - content_mean: ``(B, C)``; content_covariance: ``(B, C, C)``; style_mean:
          ``(B or 1, C)``; style_root: ``(B or 1, C, C)``.
        - output: ``(B, C, C)`` and ``(B, C)``, float64.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    channels = content_mean.shape[-1]
    for name, tensor, shape in (
        ("content_covariance", content_covariance, (channels, channels)),
        ("style_mean", style_mean, (channels,)),
        ("style_root", style_root, (channels, channels)),
    ):
        if tuple(tensor.shape[1:]) != shape:
            raise ValueError(
                f"{name} must be (B, {', '.join(map(str, shape))}), got {tuple(tensor.shape)}"
            )
    root, target = style_root.double(), style_mean.double()
    transform = root @ symmetric_power(content_covariance, -0.5, floor)  # (B, C, C)
    shift = alpha * (target - (transform @ content_mean.double().unsqueeze(-1)).squeeze(-1))
    identity = torch.eye(channels, dtype=transform.dtype, device=transform.device)
    return alpha * transform + (1.0 - alpha) * identity, shift


def whitening_coloring(
    content: Tensor,
    style: Tensor,
    alpha: float = 1.0,
    floor: float = EIGEN_FLOOR,
    max_positions: int | None = None,
) -> Tensor:
    """Whiten ``content``'s features and colour them with ``style``'s (WCT), blended with
    the content by ``alpha``; statistics per sample over the positions.

    Args:
        content: the features to restyle.
        style: the features whose mean and covariance the output takes; batch 1 (shared
            by every content sample) or the content's batch; any number of positions.
        alpha: 0 returns the content, 1 the full transform.
        floor: eigenvalues at or below it are dropped (see the module's text).
        max_positions: read larger maps on a grid (:func:`grid_stride`); ``None``: exact.

    Shape:
        - content: ``(B, C, H, W)``; style: ``(B or 1, C, h, w)``; output: like content,
          in its dtype.
    """
    if content.dim() != 4 or style.dim() != 4 or style.shape[1] != content.shape[1]:
        raise ValueError(
            f"expected (B, C, H, W) content and (B or 1, C, h, w) style, got "
            f"{tuple(content.shape)} and {tuple(style.shape)}"
        )
    if style.shape[0] not in (1, content.shape[0]):
        raise ValueError(f"style batch must be 1 or {content.shape[0]}, got {style.shape[0]}")
    content_mean, content_covariance = feature_covariance(content, max_positions)
    style_mean, style_covariance = feature_covariance(style, max_positions)
    style_root = symmetric_power(style_covariance, 0.5, floor)
    matrix, shift = whitening_coloring_affine(
        content_mean, content_covariance, style_mean, style_root, alpha, floor
    )
    dtype = torch.promote_types(content.dtype, torch.float32)
    flat = content.flatten(2).to(dtype)
    mapped = matrix.to(dtype) @ flat + shift.to(dtype).unsqueeze(-1)
    return mapped.view(content.shape).to(content.dtype)

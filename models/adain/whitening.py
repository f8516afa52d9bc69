"""The whitening and colouring transform (WCT; Li et al., NeurIPS 2017) on feature maps.

AdaIN matches each channel's mean and standard deviation; WCT matches the whole
covariance, so the channels' correlations (what a Gram matrix sees: which features fire
together, the strokes and colour pairings of a painting) follow the style too. With
content features ``c`` (mean ``mu_c``, covariance ``S_c``) and style statistics
``(mu_s, S_s)``:

.. math:: \\mathrm{WCT}(c) = S_s^{1/2}\\, S_c^{-1/2}\\, (c - \\mu_c) + \\mu_s

applied at every position, so the output's covariance is ``S_s`` and its mean ``mu_s``
(exactly on maps of up to ``COVARIANCE_POSITIONS`` positions; a larger map's statistics
are estimated on a grid of its positions, so there the match is that estimate's).
The matrix powers are taken on the eigendecomposition in float64, with eigenvalues at or
below ``EIGEN_FLOOR`` (dead or constant directions, which a ReLU map has) dropped: those
directions are projected out before colouring, as Li et al. do.

Like AdaIN, WCT of several styles is the weighted mean of their transforms
(``mu = sum_k w_k mu_k``, ``S^{1/2} -> sum_k w_k S_k^{1/2}``), and the strength ``alpha``
interpolates with the content (or an anchor): every form here is one affine map per
position, ``y = M c + t``, which a decoder folds into its first convolution
(:meth:`models.decoder.Decoder.forward_linear`).

The maths is the ``norms`` member (:mod:`norms.functional.whitening`: the covariance, its
matrix powers and the affine map, called through ``norms.functional`` at each call); this
module adds what style transfer needs around it: a style's cached statistics, several
styles mixed, masked regions, and the grid size chosen for VGG maps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

import norms.functional as NF  # noqa: N812 - looked up at each call: the maths is norms'
from models.adain.stats import convex_weights
from models.adain.transfer import blend_with_anchor, restyle_regions

#: Eigenvalues of a feature covariance at or below this are treated as zero (Li et al.'s
#: threshold; normalised VGG features have variances of order 1 to 10^3).
EIGEN_FLOOR = NF.EIGEN_FLOOR

#: Positions a feature covariance is estimated on, at most (about): a larger map is read
#: on a regular grid (:func:`feature_covariance`). 65,536 is a 256 x 256 map: relu1_1 of
#: a 512 px photo is read at every other row and column. Chosen on the development
#: images: their style and content scores moved by at most 0.005 (docs/style-transfer.md).
COVARIANCE_POSITIONS = 65_536


@dataclass(frozen=True)
class CovarianceStats:
    """A style's colouring statistics at one level: ``mean`` and ``root = S^{1/2}``.

    Shape:
        - mean: ``(N, C)``; root: ``(N, C, C)``, float64, ``N`` = 1 (shared) or the batch.
    """

    mean: Tensor
    root: Tensor

    @classmethod
    def of(cls, features: Tensor) -> CovarianceStats:
        """Statistics of ``features`` ``(N, C, H, W)`` over the positions (read on the grid
        past ``COVARIANCE_POSITIONS``), or of ``(N, C, n)`` over all ``n`` given."""
        mean, covariance = feature_covariance(features)
        return cls(mean, symmetric_power(covariance, 0.5))

    def expand(self, batch: int) -> CovarianceStats:
        """Broadcast batch-1 statistics to ``batch`` rows (or check the batch matches)."""
        if self.mean.shape[0] == batch:
            return self
        if self.mean.shape[0] != 1:
            raise ValueError(f"style statistics have batch {self.mean.shape[0]}, need 1 or {batch}")
        return CovarianceStats(self.mean.expand(batch, -1), self.root.expand(batch, -1, -1))


def mix_covariance(
    stats: Sequence[CovarianceStats], weights: Sequence[float], batch: int
) -> CovarianceStats:
    """Convex combination of several styles' colouring statistics:
    ``mu = sum_k w_k mu_k``, ``root = sum_k w_k root_k``, so that
    ``WCT(c, mix) = sum_k w_k WCT(c, s_k)``."""
    expanded = [item.expand(batch) for item in stats]
    # sums of tensors (typed ``Tensor | Literal[0]``: the start value of ``sum``)
    mean = cast(Tensor, sum(w * item.mean for w, item in zip(weights, expanded, strict=True)))
    root = cast(Tensor, sum(w * item.root for w, item in zip(weights, expanded, strict=True)))
    return CovarianceStats(mean, root)


def grid_stride(height: int, width: int, max_positions: int = COVARIANCE_POSITIONS) -> int:
    """The stride of the grid a ``(height, width)`` map's covariance is read on
    (:func:`norms.functional.grid_stride` at ``COVARIANCE_POSITIONS``)."""
    return NF.grid_stride(height, width, max_positions)


def feature_covariance(
    features: Tensor, max_positions: int = COVARIANCE_POSITIONS, *, scratch: bool = False
) -> tuple[Tensor, Tensor]:
    """Mean and covariance of ``features`` over the positions, read on the grid past
    ``COVARIANCE_POSITIONS`` (:func:`norms.functional.feature_covariance`, float64).

    Shape:
        - features: ``(B, C, H, W)`` or ``(B, C, n)``; output: ``(B, C)``, ``(B, C, C)``.
    """
    return NF.feature_covariance(features, max_positions, scratch=scratch)


def symmetric_power(matrix: Tensor, power: float, floor: float = EIGEN_FLOOR) -> Tensor:
    """``S^power`` with dead directions dropped (:func:`norms.functional.symmetric_power`)."""
    return NF.symmetric_power(matrix, power, floor)


def wct_affine(
    content: Tensor,
    styles: Sequence[CovarianceStats],
    *,
    weights: Sequence[float],
    alpha: float = 1.0,
    scratch: bool = False,
) -> tuple[Tensor, Tensor]:
    """WCT towards styles mixed by convex ``weights`` (:func:`~models.adain.stats.convex_weights`),
    blended with the content by ``alpha``, as one affine map:

    .. math:: \\mathrm{lerp}(c, \\mathrm{WCT}(c), \\alpha) = M c + t, \\quad
              M = \\alpha R S_c^{-1/2} + (1 - \\alpha) I, \\quad
              t = \\alpha (\\mu_s - R S_c^{-1/2} \\mu_c)

    with ``R`` and ``mu_s`` the mixed style's root and mean (:func:`mix_covariance`).
    ``scratch``: ``content`` is not read again and may be overwritten
    (:func:`feature_covariance`).

    Shape:
        - content: ``(B, C, h, w)`` or ``(B, C, n)``; output: ``(matrix, shift)``, ``(B, C, C)`` and ``(B, C)``
          in float64.
    """
    batch = content.shape[0]
    target = mix_covariance(styles, weights, batch)
    mean, covariance = feature_covariance(content, scratch=scratch)
    return NF.whitening_coloring_affine(mean, covariance, target.mean, target.root, alpha)


def apply_affine(features: Tensor, matrix: Tensor, shift: Tensor) -> Tensor:
    """``M f_p + t`` at every position ``p``, in ``features``' dtype.

    Shape:
        - features: ``(B, C, H, W)``; matrix: ``(B, C, C)``; shift: ``(B, C)``;
          output: like ``features``.
    """
    dtype = torch.promote_types(features.dtype, torch.float32)
    flat = features.flatten(2).to(dtype)
    mapped = matrix.to(dtype) @ flat + shift.to(dtype).unsqueeze(-1)
    return mapped.view(features.shape).to(features.dtype)


def wct_transfer(
    content: Tensor,
    styles: Sequence[CovarianceStats],
    *,
    weights: Sequence[float],
    labels: Tensor | None = None,
    alpha: float = 1.0,
    anchor: Tensor | None = None,
) -> Tensor:
    """Restyle a feature map by WCT: towards styles mixed by convex ``weights``, or (with
    ``labels``, ``weights`` unused) one style per masked region (each region whitened with
    its own statistics; pixels labelled -1 keep the content's features), then
    ``lerp(anchor, restyled, alpha)`` (``anchor`` defaults to ``content``).

    Shape:
        - content, anchor: ``(B, C, h, w)``; labels: ``(B, h, w)`` in ``[-1, K)``;
          output: ``(B, C, h, w)``.
    """
    batch = content.shape[0]
    if labels is None:
        matrix, shift = wct_affine(content, styles, weights=weights)
        restyled = apply_affine(content, matrix, shift)
    else:
        expanded = [style.expand(batch) for style in styles]

        def restyle(k: int, b: int, pixels: Tensor) -> Tensor:
            row = CovarianceStats(expanded[k].mean[b : b + 1], expanded[k].root[b : b + 1])
            matrix, shift = wct_affine(pixels, [row], weights=convex_weights(None, 1))
            return matrix[0].to(pixels.dtype) @ pixels[0] + shift[0].to(pixels.dtype)[:, None]

        restyled = restyle_regions(content, labels, len(styles), restyle, min_pixels=2)
    return blend_with_anchor(content, restyled, alpha, anchor)

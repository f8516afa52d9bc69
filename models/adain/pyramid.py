"""The image pyramid of the style-transfer presets: sizes, resizing, and how a stage
starts from the one before.

A preset (:mod:`models.adain.presets`) is a list of stages, coarse to fine (a Laplacian
pyramid in the spirit of LapStyle, Lin et al. 2021). Stage ``k`` works on an image whose
sides are ``f_k`` times the photo's; the first starts from the photo at that scale, every
later one from the previous stage's result upsampled plus the photo's own detail between
the two scales:

.. math::

    y_0 = T_0(x_0), \\qquad
    y_k = T_k\\big(\\mathrm{clip}(x_k + \\mathrm{up}(y_{k-1} - x_{k-1}))\\big),
    \\qquad x_k = \\mathrm{down}_{f_k}(x)

with ``down`` an antialiased bilinear resize (:func:`resize`), ``up`` a bicubic one
(:func:`next_stage_start`) and ``T_k`` the stage's passes (each: encode at a level, match
the style's statistics there, decode). At a coarse stage the deepest level (relu3_1, 24 px
receptive field) sees structures ``1 / f_k`` times larger than at full size, so the
style's strokes and colour regions are laid down at the scale a viewer sees them; the
later stages refine them with finer levels and bring the photo's edges back. Only the
style residual ``y - x`` is upsampled, so nothing of the photo is blurred.

The residual is upsampled bicubically (Keys' kernel, ``a = -0.75``). The interpolating
kernel's Fourier transform is its gain on the residual: at 1/4 and 3/8 cycles per coarse
pixel (half and three quarters of the coarse grid's Nyquist frequency) the bilinear
kernel (``sinc^2 f``) passes 0.81 and 0.62, the bicubic one 0.99 and 0.81. The finest
strokes a stage lays down are in that band, and the next stage, whose levels see less,
cannot put back what the upsampling took (``docs/style-transfer.md``, the pyramid).

The style is resized for each stage to a longer side of ``style_scale`` times the
stage's (:func:`style_at`): at ``style_scale = 1`` its features keep the size they
have in the painting when the painting is as large as the photo; 2 makes them twice as
large in the output, 0.5 half as large (neural-style's ``-style_scale``).
"""

from __future__ import annotations

import torch.nn.functional as F  # noqa: N812
from torch import Tensor

#: Smallest style image side: two pixels at relu4_1 (stride 8) for the 3x3 reflection pad.
MIN_STYLE_SIDE = 16


def stage_size(size: tuple[int, int], factor: float) -> tuple[int, int]:
    """``(H, W)`` scaled by ``factor``, each side rounded and at least 1."""
    height, width = size
    return max(1, round(height * factor)), max(1, round(width * factor))


def resize(image: Tensor, size: tuple[int, int]) -> Tensor:
    """``image`` ``(B, C, H, W)`` resized to ``size`` by bilinear interpolation, antialiased
    when it shrinks, clamped to ``[0, 1]``; the same object when the size is already right."""
    if tuple(image.shape[-2:]) == tuple(size):
        return image
    shrinks = size[0] < image.shape[-2] or size[1] < image.shape[-1]
    out = F.interpolate(image, size=size, mode="bilinear", antialias=shrinks, align_corners=False)
    return out.clamp_(0.0, 1.0)


def style_at(style: Tensor, side: int, style_scale: float, *, min_side: int) -> Tensor:
    """The style resized (aspect kept, up or down) to a longer side of ``style_scale x side``,
    its shorter side at least ``min_side``.

    Shape:
        - style: ``(N, 3, h, w)``; output: ``(N, 3, h', w')``.
    """
    height, width = style.shape[-2:]
    factor = max(style_scale * side / max(height, width), min_side / min(height, width))
    return resize(style, stage_size((height, width), factor))


def next_stage_start(photo: Tensor, previous: Tensor, previous_photo: Tensor) -> Tensor:
    """The start of a finer stage: the photo at its scale plus the previous stage's style
    residual upsampled, ``clip(x_k + up(y_{k-1} - x_{k-1}))``.

    Shape:
        - photo: ``(B, 3, H, W)``; previous, previous_photo: ``(B, 3, h, w)``; output: like
          ``photo``.
    """
    residual = previous - previous_photo
    up = F.interpolate(residual, size=photo.shape[-2:], mode="bicubic", align_corners=False)
    return (photo + up).clamp_(0.0, 1.0)

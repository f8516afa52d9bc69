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

with ``down`` an antialiased bilinear resize (:func:`resize`), ``up`` a bilinear one
(:func:`next_stage_start`) and ``T_k`` the stage's passes (each: encode at a level, match
the style's statistics there, decode). At a coarse stage the deepest level (relu3_1, 24 px
receptive field) sees structures ``1 / f_k`` times larger than at full size, so the
style's strokes and colour regions are laid down at the scale a viewer sees them; the
later stages refine them with finer levels and bring the photo's edges back. Only the
style residual ``y - x`` is upsampled, so nothing of the photo is blurred.

The style is resized for each stage to a longer side of ``style_scale`` times the
stage's (:func:`style_at`): at ``style_scale = 1`` its features keep the size they
have in the painting when the painting is as large as the photo; 2 makes them twice as
large in the output, 0.5 half as large (neural-style's ``-style_scale``).

A stage may first seed texture in the image's flat regions (:func:`fill_flat_regions`):
WCT colours the whitened features, and a flat region has none, so a flat sky or wall
would keep the photo's plain colour wherever the painting has strokes or stars. Noise
added there is whitened and coloured like any feature, so it becomes the style's own
texture at the stage's scale, and nothing where the style is flat.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

#: :func:`fill_flat_regions`: the window (pixels of the stage's image) whose luminance
#: deviation tells a flat region, the deviation at which the noise is gone, and the seed
#: of the noise (one fixed draw per image size, so the same inputs give the same output).
FLAT_WINDOW = 5
FLAT_DEVIATION = 0.05
FLAT_NOISE_SEED = 0


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
    up = F.interpolate(residual, size=photo.shape[-2:], mode="bilinear", align_corners=False)
    return (photo + up).clamp_(0.0, 1.0)


def fill_flat_regions(image: Tensor, strength: float, region: Tensor | None = None) -> Tensor:
    """``image`` with Gaussian noise added where its luminance is flat, to seed the style's
    texture there.

    .. math::

        g(p) = \\mathrm{clip}\\big(1 - s(p) / \\tau,\\ 0,\\ 1\\big), \\qquad
        \\mathrm{out} = \\mathrm{clip}\\big(x + \\sigma\\, g\\, m\\, n,\\ 0,\\ 1\\big)

    with ``s(p)`` the standard deviation of the luminance (channel mean) over the
    ``FLAT_WINDOW``-pixel square around ``p`` (reflected at the borders), ``tau =
    FLAT_DEVIATION``, ``sigma = strength``, ``m`` the ``region`` (1 where none is given)
    and ``n ~ N(0, 1)`` per pixel and channel: drawn on the CPU from ``FLAT_NOISE_SEED``
    for the image's size and shared by every row of the batch, so a row's output does
    not depend on the rows beside it, on the device, or on the call.

    Args:
        image: RGB in ``[0, 1]``.
        strength: ``sigma``, the noise's standard deviation in a fully flat region.
        region: where noise may go, in ``[0, 1]`` (a mask's region); ``None``: everywhere.

    Shape:
        - image: ``(B, 3, H, W)``; region: ``(1 or B, 1, H, W)``; output: like ``image``.
    """
    height, width = image.shape[-2:]
    pad = min(FLAT_WINDOW // 2, height - 1, width - 1)
    # float64: the window's E[l^2] - E[l]^2 cancels digits (the stage's image is small)
    luma = F.pad(image.double().mean(dim=1, keepdim=True), (pad,) * 4, mode="reflect")
    window = 2 * pad + 1
    mean = F.avg_pool2d(luma, window, stride=1)
    deviation = (F.avg_pool2d(luma.square(), window, stride=1) - mean.square()).clamp_(0).sqrt_()
    weight = (1.0 - deviation / FLAT_DEVIATION).clamp_(0.0, 1.0).to(image.dtype)
    if region is not None:
        weight = weight * region
    generator = torch.Generator().manual_seed(FLAT_NOISE_SEED)
    noise = torch.randn((1, 3, height, width), generator=generator).to(image.device)
    return (image + (strength * weight) * noise).clamp_(0.0, 1.0).to(image.dtype)

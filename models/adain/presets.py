"""Style-transfer presets: which pass runs, and at what working resolution.

- ``quality`` (the default): the model's default coarse-to-fine pass
  (relu3_1 -> relu2_1 -> relu3_1 -> relu2_1) at the image's own resolution.
- ``realtime``: relu3_1 -> relu2_1 at a working resolution whose longer side is at most
  ``REALTIME_WORKING_SIDE``; the full-resolution detail comes back from the photo by
  upsampling only the style *residual* (the change the stylisation made), and one
  relu1_1 pass at full resolution gives the fine scale the style's statistics:

  .. math::

      y = T_{1}\\Big(\\mathrm{up}\\big(T_{3,2}(x_\\downarrow)\\big)
          + g\\,\\big(x - \\mathrm{up}(x_\\downarrow)\\big)\\Big), \\quad x_\\downarrow = \\mathrm{down}(x)

  with ``x`` the photo, ``down`` an antialiased bilinear downscale, ``T_{3,2}`` the
  relu3_1 -> relu2_1 passes, ``up`` a bilinear upscale back to the photo's size,
  ``g`` the detail gain and ``T_1`` the relu1_1 pass. Colours and the style's textures
  come from ``T_{3,2}`` at the working scale (the style image is scaled like the photo);
  edges and fine detail from ``x``; their contrast from ``T_1``. The gain gives the
  restored detail the style's share of fine detail (:func:`matched_detail_gain`):

  .. math:: g = \\mathrm{clip}\\Big(\\sqrt{E(s) / E(x)},\\ 1,\\ 4\\Big), \\qquad
            E(x) = \\mathrm{mean}\\big((x - \\mathrm{up}(x_\\downarrow))^2\\big)

  with ``s`` the style image (the styles' ``E`` weighted like their statistics), each
  image downscaled by the same factor as the photo.
  Cost per pixel (encoder + decoder): relu3_1 ~223 kMAC, relu2_1 ~113 kMAC, relu1_1
  ~3.5 kMAC; for a 512 x 512 photo that is ~6.4 GMAC (5.5 at 128 x 128, 0.9 at full size)
  against ~180 GMAC for ``quality``.

Why these choices, as measured by ``benchmarks/adain_bench.py``: see docs/style-transfer.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

from models.adain.images import resize_max_side

#: The preset names, for argument parsers and request schemas.
PresetName = Literal["quality", "realtime"]

#: Longer side of the realtime working resolution (chosen on the shared development images).
REALTIME_WORKING_SIDE = 128
#: Bounds of the realtime detail gain (see :func:`matched_detail_gain`).
REALTIME_DETAIL_GAIN_BOUNDS = (1.0, 4.0)


@dataclass(frozen=True)
class Preset:
    """A named speed/quality trade-off.

    Args:
        name: the preset's name.
        levels: the pass, deepest first; ``None`` runs the model's default pass.
        working_side: longest side the pass runs at (larger images are stylised at this
            size and their detail restored from the photo); ``None`` is full resolution.
        detail_gain_bounds: the range :func:`matched_detail_gain` clips ``g`` of
            :func:`restore_detail` to; ``(1, 1)`` restores the photo's detail as it is.
        detail_levels: passes run at full resolution after the detail is restored (only
            when the image was downscaled).
    """

    name: str
    levels: tuple[str, ...] | None = None
    working_side: int | None = None
    detail_gain_bounds: tuple[float, float] = (1.0, 1.0)
    detail_levels: tuple[str, ...] = ()

    def downscale(self, image: Tensor) -> Tensor:
        """``image`` ``(B, C, H, W)`` at the working resolution: antialiased bilinear; the
        same object when it is already small enough (never upscales)."""
        if self.working_side is None:
            return image
        return resize_max_side(image, self.working_side)


PRESETS: dict[str, Preset] = {
    "quality": Preset("quality"),
    "realtime": Preset(
        "realtime",
        levels=("relu3_1", "relu2_1"),
        working_side=REALTIME_WORKING_SIDE,
        detail_gain_bounds=REALTIME_DETAIL_GAIN_BOUNDS,
        detail_levels=("relu1_1",),
    ),
}
assert set(PRESETS) == set(get_args(PresetName))


def get_preset(name: str) -> Preset:
    """The preset called ``name``; an unknown name raises ``ValueError`` listing the valid ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; valid: {sorted(PRESETS)}") from None


def scale_image(image: Tensor, scale: float, *, min_side: int) -> Tensor:
    """``image`` ``(B, C, H, W)`` scaled down by ``scale`` (antialiased), its shorter side kept
    at ``min_side`` or more; ``scale >= 1`` returns it unchanged. Style images are scaled
    like the photo so their textures keep their size relative to it."""
    height, width = image.shape[-2:]
    scale = max(scale, min_side / min(height, width))
    return resize_max_side(image, max(1, round(max(height, width) * scale)))


def _upsample(image: Tensor, like: Tensor) -> Tensor:
    return F.interpolate(image, size=like.shape[-2:], mode="bilinear", align_corners=False)


def detail_energy(image: Tensor, small: Tensor) -> Tensor:
    """The mean energy per pixel of the detail a downscale removed: ``(B,)``.

    .. math:: E = \\mathrm{mean}\\big((x - \\mathrm{up}(x_\\downarrow))^2\\big)

    Shape:
        - image: ``(B, 3, H, W)``; small: ``(B, 3, h, w)``, ``image`` downscaled.
    """
    return (image - _upsample(small, image)).square().flatten(1).mean(dim=1)


def matched_detail_gain(
    content: Tensor,
    content_small: Tensor,
    styles: Sequence[tuple[Tensor, Tensor]],
    weights: Sequence[float] | None,
    bounds: tuple[float, float],
) -> Tensor:
    """The detail gain that gives the photo's restored detail the style's energy.

    .. math:: g = \\mathrm{clip}\\Big(\\sqrt{\\textstyle\\sum_k w_k E(s_k) / E(x)},
              \\ g_{min},\\ g_{max}\\Big)

    A painting with strong brush strokes loses more to the downscale than a photo does,
    and gets its fine detail back by a larger gain; a smooth style keeps the photo's.
    The rule and its bounds were chosen on the shared development images (see
    docs/style-transfer.md).

    Args:
        content, content_small: the photo ``(B, 3, H, W)`` and its working-size copy.
        styles: ``(style, style_small)`` per style, each ``(1 or B, 3, h, w)``, the small
            one scaled by the photo's factor.
        weights: the styles' weights (summing to 1); ``None`` weighs them equally.
        bounds: ``(g_min, g_max)``.

    Returns:
        ``(B, 1, 1, 1)``, ready to broadcast in :func:`restore_detail`.
    """
    low, high = bounds
    if low == high:
        return torch.full((content.shape[0], 1, 1, 1), low, device=content.device)
    weights = weights or [1.0 / len(styles)] * len(styles)
    style_energy = sum(
        weight * detail_energy(style, small)
        for weight, (style, small) in zip(weights, styles, strict=True)
    )
    ratio = style_energy / detail_energy(content, content_small).clamp_min(1e-12)
    return ratio.sqrt().clamp(low, high).view(-1, 1, 1, 1)


def restore_detail(
    stylised: Tensor, content_small: Tensor, content: Tensor, *, gain: float | Tensor = 1.0
) -> Tensor:
    """Upsample the stylised image and add the photo's detail that the downscale removed.

    .. math:: y = \\mathrm{up}(s) + g\\,\\big(x - \\mathrm{up}(x_\\downarrow)\\big)

    With ``g = 1`` this is ``x + up(s - x_down)``: only the style residual is upsampled.
    ``g > 1`` also sharpens the photo's detail (paintings have more high-frequency energy
    than an upsampled image, and the style statistics see it).

    Shape:
        - stylised, content_small: ``(B, 3, h, w)`` (the pass's output and its input)
        - content: ``(B, 3, H, W)``; gain: a number or ``(B, 1, 1, 1)``;
          output: ``(B, 3, H, W)`` in ``[0, 1]``.
    """
    detail = content - _upsample(content_small, content)
    return (_upsample(stylised, content) + gain * detail).clamp(0.0, 1.0)

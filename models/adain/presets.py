"""Style-transfer presets: which pass runs, and at what working resolution.

- ``quality`` (the default): the model's default coarse-to-fine pass
  (relu3_1 -> relu2_1 -> relu3_1 -> relu2_1) at the image's own resolution.
- ``realtime``: relu3_1 -> relu2_1 at a working resolution whose longer side is at most
  ``REALTIME_WORKING_SIDE``; the full-resolution detail comes back from the photo by
  upsampling only the style *residual* (the change the stylisation made), the band the
  working scale drops is rebuilt with the style's energy and fine texture, and one
  relu1_1 pass at full resolution gives the fine scale the style's statistics:

  .. math::

      y = T_{1}\\Big(\\mathrm{up}\\big(T_{3,2}(x_\\downarrow)\\big)
          + (1 - \\alpha)\\, d_x + \\alpha\\,(a\\, d_x + b\\, t)\\Big),
      \\quad x_\\downarrow = \\mathrm{down}(x)

  with ``x`` the photo, ``down`` an antialiased bilinear downscale, ``T_{3,2}`` the
  relu3_1 -> relu2_1 passes, ``up`` a bilinear upscale back to the photo's size, ``T_1``
  the relu1_1 pass and ``alpha`` the style strength. Colours and the style's coarse
  textures come from ``T_{3,2}`` at the working scale (the style image is scaled like
  the photo); edges from the photo's detail band ``d_x = x - up(x_down)``; the fine
  texture ``t`` from the style: its detail band ``s - up(s_down)`` cut into blocks laid
  out in a fixed shuffled order (:func:`shuffled_texture`). The weights give the band
  the style's energy near every pixel (:func:`matched_detail`, :func:`detail_weights`):

  .. math:: a = \\sqrt{\\min\\big(1,\\ E(s) / E_p(x)\\big)}, \\quad
            b = \\sqrt{\\max\\big(0,\\ 1 - E_p(x) / E(s)\\big)}, \\quad
            E(s) = \\mathrm{mean}(d_s^2)

  with ``E_p(x)`` the photo's detail energy around pixel ``p`` (:func:`local_energy`), so
  flat regions (a sky, a wall) take the style's texture and busy ones are toned down.

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
#: Side of the blocks :func:`shuffled_texture` lays out (chosen on the development images).
TEXTURE_BLOCK = 16
#: Side of the windows :func:`local_energy` averages over (chosen on the development images).
ENERGY_WINDOW = 32


@dataclass(frozen=True)
class Preset:
    """A named speed/quality trade-off.

    Args:
        name: the preset's name.
        levels: the pass, deepest first; ``None`` runs the model's default pass.
        working_side: longest side the pass runs at (larger images are stylised at this
            size and their detail restored from the photo); ``None`` is full resolution.
        texture_fill: rebuild the detail band the working scale drops with the style's
            energy and fine texture (:func:`matched_detail`); off restores the photo's
            detail as it is.
        detail_levels: passes run at full resolution after the detail is restored (only
            when the image was downscaled).
    """

    name: str
    levels: tuple[str, ...] | None = None
    working_side: int | None = None
    texture_fill: bool = False
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
        texture_fill=True,
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


def detail_band(image: Tensor, small: Tensor) -> Tensor:
    """The detail a downscale removed: ``x - up(x_down)``.

    Shape:
        - image: ``(B, C, H, W)``; small: ``(B, C, h, w)``, ``image`` downscaled;
          output: ``(B, C, H, W)``.
    """
    return image - _upsample(small, image)


def energy(detail: Tensor) -> Tensor:
    """Mean energy per pixel, ``E = mean(d^2)``, per image: ``(B,)``."""
    return detail.square().flatten(1).mean(dim=1)


def local_energy(detail: Tensor, window: int = ENERGY_WINDOW) -> Tensor:
    """Energy per pixel near each pixel, ``E_p = mean(d^2)`` over the window around ``p``.

    ``d^2`` is averaged over the channels and over ``window x window`` blocks (those at the
    far edges cut to the image), and the block means are interpolated bilinearly between
    the blocks' centres (constant beyond the outer centres).

    Shape:
        - detail: ``(B, C, H, W)``; output: ``(B, 1, H, W)``.
    """
    per_pixel = detail.square().mean(dim=1, keepdim=True)
    block_means = F.avg_pool2d(per_pixel, window, ceil_mode=True)
    return _upsample(block_means, per_pixel)


def sine_window(length: int) -> Tensor:
    """``w(n) = sin(pi (n + 1/2) / length)``, ``(length,)``: with blocks overlapping by half,
    ``w(n)^2 + w(n + length/2)^2 = 1``, so overlap-adding independent zero-mean blocks
    weighted by ``w`` (in 2-D by ``w(i) w(j)``) keeps their variance."""
    n = torch.arange(length, dtype=torch.float64)
    return torch.sin(torch.pi * (n + 0.5) / length)


def shuffled_texture(
    detail: Tensor, size: tuple[int, int], *, block: int = TEXTURE_BLOCK
) -> Tensor:
    """A stationary texture of ``size`` made from blocks of ``detail`` in a shuffled order.

    ``detail`` (a style's detail band) is cut into ``2 block x 2 block`` patches centred on
    a grid of step ``block``; output cell ``c`` on the same grid takes patch ``pi(c)``,
    drawn uniformly with a fixed seed, and the patches are overlap-added with the window
    ``w(i) w(j)`` of :func:`sine_window`:

    .. math:: t(p) = \\sum_c w(p - p_c)\\, d\\big(p - p_c + q_{\\pi(c)}\\big)

    The local structure (strokes, grain) is kept, its place in the style is not, so no
    outline of the style's picture shows. The layout is a function of the shapes only:
    the same style gives the same texture in every call and every batch.

    Shape:
        - detail: ``(N, C, h, w)`` with ``h, w >= 2`` (``block`` shrinks to fit a smaller
          detail); output: ``(N, C, *size)``.
    """
    height, width = size
    block = min(block, *detail.shape[-2:]) // 2 * 2  # even, and no larger than the style
    half = block // 2
    rows, cols = detail.shape[-2] // block, detail.shape[-1] // block
    padded = F.pad(detail[..., : rows * block, : cols * block], (half,) * 4, mode="reflect")
    patches = padded.unfold(2, 2 * block, block).unfold(3, 2 * block, block)  # a view:
    # (N, C, rows, cols, 2 block, 2 block)
    cells_y, cells_x = -(-height // block), -(-width // block)
    order = torch.randint(
        rows * cols, (cells_y, cells_x), generator=torch.Generator().manual_seed(0)
    ).to(detail.device)
    window = sine_window(2 * block).to(detail.device, detail.dtype)
    window = window[:, None] * window[None, :]
    batch, channels = detail.shape[:2]
    texture = detail.new_zeros(batch, channels, (cells_y + 1) * block, (cells_x + 1) * block)
    # the cells of one parity do not overlap: each parity is one strided layout of patches
    for y0 in (0, 1):
        for x0 in (0, 1):
            picked = order[y0::2, x0::2]
            if picked.numel() == 0:
                continue
            ny, nx = picked.shape
            tiles = patches[:, :, picked // cols, picked % cols]  # (N, C, ny, nx, 2b, 2b)
            tiles = tiles.mul_(window).permute(0, 1, 2, 4, 3, 5)
            tiles = tiles.reshape(batch, channels, ny * 2 * block, nx * 2 * block)
            top, left = y0 * block, x0 * block
            texture[..., top : top + ny * 2 * block, left : left + nx * 2 * block] += tiles
    return texture[..., half : half + height, half : half + width]


def detail_weights(photo_energy: Tensor, style_energy: Tensor) -> tuple[Tensor, Tensor]:
    """The weights ``(a, b)`` of the photo's detail and of the style's texture that give the
    detail band the style's energy, elementwise (the two energies broadcast):

    .. math:: a = \\sqrt{\\min\\big(1,\\ E(s) / E(x)\\big)}, \\qquad
              b = \\sqrt{\\max\\big(0,\\ 1 - E(x) / E(s)\\big)}

    so that ``a^2 E(x) + b^2 E(s) = E(s)``: a photo with less fine detail than the style
    keeps it all and the style's texture fills the rest; one with more is toned down.
    """
    tiny = torch.finfo(photo_energy.dtype).tiny
    ratio = style_energy / photo_energy.clamp_min(tiny)
    photo = ratio.clamp(max=1.0).sqrt()
    texture = (1.0 - photo_energy / style_energy.clamp_min(tiny)).clamp_min(0.0).sqrt()
    return photo, texture


def matched_detail(
    photo_detail: Tensor,
    styles: Sequence[tuple[Tensor, Tensor]],
    *,
    weights: Sequence[float] | None = None,
    labels: Tensor | None = None,
    block: int = TEXTURE_BLOCK,
    window: int = ENERGY_WINDOW,
) -> Tensor:
    """The band the working scale drops, rebuilt with the style's energy: ``a d_x + b t``.

    Each style ``s_k`` gives its detail band ``d_k`` = :func:`detail_band` (energy ``E_k``)
    and the texture ``t_k`` = :func:`shuffled_texture` of it. Without masks the styles mix
    with their weights, ``t = sum_k sqrt(w_k) t_k`` (energy ``E(s) = sum_k w_k E_k``), and
    ``(a, b)`` = :func:`detail_weights` ``(E_p(x), E(s))``, per pixel with the photo's
    :func:`local_energy` ``E_p(x)``; with region ``labels`` each pixel takes its own
    style's ``a_k d_x + b_k t_k``, and a pixel of no style keeps ``d_x``.

    Args:
        photo_detail: the photo's detail band ``d_x``, ``(B, 3, H, W)``.
        styles: ``(style, style_small)`` per style, each ``(1 or B, 3, h, w)``, the small
            one scaled by the photo's factor.
        weights: the styles' weights (summing to 1); ignored with ``labels``.
        labels: ``(B, H, W)`` style index per pixel, ``-1`` for none (masks).
        block: the block side of :func:`shuffled_texture`.
        window: the window side of :func:`local_energy`.

    Returns:
        ``(B, 3, H, W)``.
    """
    photo_energy = local_energy(photo_detail, window)
    textures, energies = [], []
    for style, small in styles:
        detail = detail_band(style, small)
        energies.append(energy(detail).view(-1, 1, 1, 1))
        textures.append(shuffled_texture(detail, photo_detail.shape[-2:], block=block))
    if labels is not None:
        matched = photo_detail * (labels < 0).unsqueeze(1)
        for index, (texture, style_energy) in enumerate(zip(textures, energies, strict=True)):
            photo, fill = detail_weights(photo_energy, style_energy)
            matched = matched + (labels == index).unsqueeze(1) * (
                photo * photo_detail + fill * texture
            )
        return matched
    weights = weights or [1.0 / len(styles)] * len(styles)
    style_energy = sum(w * e for w, e in zip(weights, energies, strict=True))
    texture = sum(w**0.5 * t for w, t in zip(weights, textures, strict=True))
    photo, fill = detail_weights(photo_energy, style_energy)
    return photo * photo_detail + fill * texture


def restore_detail(stylised: Tensor, detail: Tensor) -> Tensor:
    """Upsample the stylised image to the photo's size and add the full-size ``detail``.

    .. math:: y = \\mathrm{up}(s) + d

    With the photo's own detail band ``d = x - up(x_down)`` this is ``x + up(s - x_down)``:
    only the style residual is upsampled.

    Shape:
        - stylised: ``(B, 3, h, w)``; detail: ``(B, 3, H, W)``;
          output: ``(B, 3, H, W)`` in ``[0, 1]``.
    """
    return (_upsample(stylised, detail) + detail).clamp(0.0, 1.0)

"""Style-transfer presets and their image pyramid: the stages, the passes at each, and how
a stage is sized and starts from the one before.

A preset is a list of stages, coarse to fine; stage ``k`` runs its passes on the image
resized by ``f_k`` (the pyramid, below).

Presets (chosen on the development images, ``docs/style-transfer.md``):

- ``quality`` (the default): WCT passes relu3_1 at 1/8, 1/4 and 1/2 scale, relu1_1 at
  full size: of the measured pyramids within ~10 % of the previous one's time (relu3_1
  -> relu2_1 at 1/4, relu2_1 -> relu1_1 at 1/2) on 3:2 photos and inside issue 3's
  mean/std test, the one with the lowest 1/2-scale worst pair on the development star field
  (the pyramid comparison of commit b3c7d49).
- ``realtime``: relu3_1 at 1/8, relu2_1 at 1/4, relu1_1 at 1/2 and at full size: the
  best-scoring measured pyramid that keeps every development median and worst pair
  under the peer's at <= 0.8x its time (the margin the evaluation's run-to-run spread
  needs under the 1x target; the same comparison).

Cost per pixel of the photo (encoder + decoder at a level: relu3_1 ~223 kMAC, relu2_1
~113 kMAC, relu1_1 ~3.5 kMAC per pixel of the image it runs on): for 512 x 512, quality
~20 GMAC and realtime ~4 GMAC, plus one eigendecomposition of the content's covariance
per pass (256 x 256 at relu3_1); the previous full-size ``quality`` ran ~180 GMAC.

Both match the whole covariance of the features (WCT, :mod:`models.adain.whitening`);
an explicit ``levels=`` pass (the paper's single-level mode and its multi-level form)
runs AdaIN at full size.

**The pyramid.** A preset's stages, coarse to fine, make a Laplacian pyramid in the
spirit of LapStyle (Lin et al. 2021). Stage ``k`` works on an image whose sides are
``f_k`` times the photo's; the first starts from the photo at that scale, every later
one from the previous stage's result upsampled plus the photo's own detail between the
two scales:

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

**The size and cost plan** (:func:`octave_sizes`, :func:`styles_side`,
:func:`stylize_cost`): what a request is sized and priced by before anything is decoded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import torch.nn.functional as F  # noqa: N812
from torch import Tensor

#: The preset names, for argument parsers and request schemas.
PresetName = Literal["quality", "realtime"]
#: How a pass matches the style's statistics.
Transform = Literal["wct", "adain"]

#: The range of ``style_scale`` (the style's features' size in the output).
MIN_STYLE_SCALE = 0.25
MAX_STYLE_SCALE = 2.0

R3, R2, R1 = "relu3_1", "relu2_1", "relu1_1"

#: Longer side of the base: what the pyramid runs on whole (print-size octaves above it).
BASE_SIDE = 1024


@dataclass(frozen=True)
class Stage:
    """One scale of the pyramid: ``levels`` (deepest first) run on the image resized by
    ``factor`` (``1`` is full size)."""

    factor: float
    levels: tuple[str, ...]


@dataclass(frozen=True)
class Preset:
    """A named pyramid.

    Args:
        name: the preset's name.
        stages: coarse to fine; the last one at ``factor = 1``.
        transform: ``"wct"`` (the whole covariance) or ``"adain"`` (means and standard
            deviations per channel).
    """

    name: str
    stages: tuple[Stage, ...]
    transform: Transform = "wct"

    @property
    def levels(self) -> tuple[str, ...]:
        """Every pass's level, coarse stage first."""
        return tuple(level for stage in self.stages for level in stage.levels)

    def parameters(self) -> dict[str, object]:
        """What an image made with this preset records of it (PNG text chunks): its name
        and its passes' levels, coarse stage first."""
        return {"preset": self.name, "levels": list(self.levels)}

    @property
    def passes(self) -> int:
        """Passes over all the stages (what a step control counts)."""
        return sum(len(stage.levels) for stage in self.stages)

    @property
    def full_size_passes(self) -> float:
        """The passes' work in full-size-pass equivalents, ``sum_k len(levels_k) f_k^2``:
        a pass on an image whose sides are ``f`` times the photo's covers ``f^2`` of its
        pixels (both presets: 1/64 + 1/16 + 1/4 + 1 = 1.328125). It counts pixels, not
        the levels' work: a relu3_1 pass costs ~64x a relu1_1 pass per pixel."""
        return sum(len(stage.levels) * stage.factor**2 for stage in self.stages)

    def last_pass(self) -> Preset:
        """The preset's last pass alone at full size: what ``alpha = 0`` shows (every pass
        is anchored to the photo, so only the last decoder's reconstruction remains)."""
        return Preset(self.name, (Stage(1.0, self.stages[-1].levels[-1:]),), self.transform)


PRESETS: dict[str, Preset] = {
    "quality": Preset(
        "quality",
        (Stage(0.125, (R3,)), Stage(0.25, (R3,)), Stage(0.5, (R3,)), Stage(1.0, (R1,))),
    ),
    "realtime": Preset(
        "realtime",
        (Stage(0.125, (R3,)), Stage(0.25, (R2,)), Stage(0.5, (R1,)), Stage(1.0, (R1,))),
    ),
}
assert set(PRESETS) == set(get_args(PresetName))


def get_preset(name: str) -> Preset:
    """The preset called ``name``; an unknown name raises ``ValueError`` listing the valid ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; valid: {sorted(PRESETS)}") from None


def levels_preset(levels: tuple[str, ...]) -> Preset:
    """An explicit pass at full size with AdaIN (the paper's single- or multi-level mode)."""
    return Preset("levels", (Stage(1.0, levels),), "adain")


def check_style_scale(style_scale: float) -> float:
    """``style_scale`` as a float in ``[MIN_STYLE_SCALE, MAX_STYLE_SCALE]``, else ``ValueError``."""
    value = float(style_scale)
    if not (math.isfinite(value) and MIN_STYLE_SCALE <= value <= MAX_STYLE_SCALE):
        raise ValueError(
            f"style_scale must be in [{MIN_STYLE_SCALE}, {MAX_STYLE_SCALE}], got {style_scale}"
        )
    return value


# ------------------------------------------------------------- the pyramid

#: Smallest style image side: two pixels at relu4_1 (stride 8) for the 3x3 reflection pad.
MIN_STYLE_SIDE = 16


def octave_sizes(size: tuple[int, int], base_side: int = BASE_SIDE) -> list[tuple[int, int]]:
    """The print-size octaves' ``(H, W)``, coarse to fine: ``size`` halved (rounding up)
    while the half's longer side is still above ``base_side``; empty when ``size`` fits
    the base."""
    if max(size) <= base_side:
        return []
    sizes = [size]
    while max(half := (math.ceil(sizes[-1][0] / 2), math.ceil(sizes[-1][1] / 2))) > base_side:
        sizes.append(half)
    return sizes[::-1]


def styles_side(size: int) -> int:
    """The longest side a style needs for a photo of ``size``: ``size``, and no more than
    the largest side a style is used at (``MAX_STYLE_SCALE`` times the base: the octaves
    enlarge it from there), so that a print's styles are not read at print size."""
    return min(size, math.ceil(MAX_STYLE_SCALE * BASE_SIDE))


def stylize_cost(
    size: int, styles: int, passes: float, style_scale: float = 1.0
) -> tuple[int, int]:
    """A stylisation's cost bound in pixel-passes, the pyramid's and the octaves' (their
    sum is the bound): the preset's ``passes`` (:attr:`Preset.full_size_passes`) over the
    photo and the styles at ``base = min(size, BASE_SIDE)`` (a style at most
    ``style_scale x`` the side it is used at), then one pass per print-size octave
    (:func:`octave_sizes`) counted ``side^2``:

    .. math:: \\mathrm{cost} = b^2 (1 + n_s \\max(1, s)^2) p + \\sum_k \\mathrm{side}_k^2
    """
    base = min(size, BASE_SIDE)
    pyramid = math.ceil(base * base * (1 + styles * max(1.0, style_scale) ** 2) * passes)
    return pyramid, sum(height * width for height, width in octave_sizes((size, size)))


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

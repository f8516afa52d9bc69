"""Style-transfer presets: the stages of the image pyramid and the passes at each.

A preset is a list of stages, coarse to fine; stage ``k`` runs its passes on the image
resized by ``f_k`` (:mod:`models.adain.pyramid` has the pyramid's maths).

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

#: The preset names, for argument parsers and request schemas.
PresetName = Literal["quality", "realtime"]
#: How a pass matches the style's statistics.
Transform = Literal["wct", "adain"]

#: The range of ``style_scale`` (the style's features' size in the output).
MIN_STYLE_SCALE = 0.25
MAX_STYLE_SCALE = 2.0

R3, R2, R1 = "relu3_1", "relu2_1", "relu1_1"


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

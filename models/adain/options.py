"""The options of one stylisation: how a photo is painted, whatever paints it.

:meth:`~models.adain.pipeline.StyleTransfer.stylize`,
:meth:`~models.adain.pipeline.StyleTransfer.print_stylization` (and the service's
protocol for them, and its fakes) take these options as keywords, typed once by
:class:`StyleKeywords`; inside, they are one :class:`StyleOptions`, which owns their
defaults and meaning and is what :class:`~models.adain.large.PrintStylization` keeps.
The service carries one :class:`StyleOptions` from the request to the model; a job's
stored input holds it as ``dataclasses.asdict`` writes it, read back by
``StyleOptions(**fields)`` (a field a record predates, as ``style_scale`` for the jobs
queued before it existed, takes its default).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TypedDict, cast

__all__ = ["StyleKeywords", "StyleOptions"]


class StyleKeywords(TypedDict, total=False):
    """:class:`StyleOptions` as keyword arguments (``**keywords: Unpack[StyleKeywords]``),
    each optional; the same fields, which a test keeps in step."""

    style_weights: Sequence[float] | None
    alpha: float
    preserve_color: bool
    preset: str | None
    style_scale: float


@dataclass(frozen=True)
class StyleOptions:
    """How a photo is painted.

    Attributes:
        style_weights: one non-negative weight per style, normalised to sum 1 by
            :func:`~models.adain.stats.convex_weights` (default: equal weights); the
            styles' statistics are interpolated. Not combined with masks
            (:func:`~models.adain.stats.check_masks`).
        alpha: content-style trade-off on the features, in ``[0, 1]`` (0 reconstructs the
            content, 1 is full style).
        preserve_color: transfer luminance only and keep the content's chroma.
        preset: ``"quality"`` or ``"realtime"`` (default: the model's preset): the stages
            of the pyramid and their passes, see :mod:`models.adain.presets`.
        style_scale: the size of the style's features in the output, in ``[0.25, 2]``:
            each stage sees the style resized to ``style_scale`` times its own longer side
            (1: as large as in the painting at the photo's size); checked by
            :func:`~models.adain.presets.check_style_scale` where it is used.
    """

    style_weights: Sequence[float] | None = None
    alpha: float = 1.0
    preserve_color: bool = False
    preset: str | None = None
    style_scale: float = 1.0

    def __post_init__(self) -> None:
        # a tuple, so that equal options hash equal (a batcher's key holds them)
        if self.style_weights is not None:
            object.__setattr__(self, "style_weights", tuple(self.style_weights))

    def keywords(self) -> StyleKeywords:
        """The options as the model's methods take them (``**options.keywords()``)."""
        return cast(StyleKeywords, asdict(self))

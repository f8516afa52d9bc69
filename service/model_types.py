"""The typed boundary between the service and the models: what the workers call.

The service holds models only through these protocols (structural: the real
``StyleTransfer`` and ``TextToImage`` and the tests' fakes all satisfy them), so a route
or a worker never reads a model attribute by name.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Protocol

from torch import Tensor

from models.control import StepControl
from models.dit.options import GenerateDefaults, GenerateOptions

__all__ = [
    "BatchJob",
    "GenerateDefaults",
    "GenerateOptions",
    "StyleTransferModel",
    "TextToImageModel",
]


class BatchJob(Protocol):
    """A unit of work for a worker pool: jobs with equal keys share a forward."""

    def batch_key(self) -> Hashable: ...


class StyleTransferModel(Protocol):
    """What the stylize worker calls (``models.adain.StyleTransfer``)."""

    def describe(self) -> dict[str, Any]: ...

    def warm_up(self) -> float:
        """Run a small request once (lazy initialisation off the first client's clock);
        the seconds it took."""
        ...

    def full_size_passes(self, preset: str | None = None) -> float:
        """The work of stylising one image with ``preset``, in full-size-pass equivalents
        (a pass on an image ``f`` times the photo's sides counts ``f^2``): what the
        stylize route's cost bound multiplies by."""
        ...

    def stylize(
        self,
        content: Tensor,
        styles: Sequence[Tensor],
        *,
        style_weights: Sequence[float] | None = None,
        alpha: float = 1.0,
        preserve_color: bool = False,
        masks: Sequence[Tensor] | None = None,
        preset: str | None = None,
        style_scale: float = 1.0,
        control: StepControl | None = None,
    ) -> Tensor:
        """``(B, 3, H, W)`` in, one ``(3, H, W)`` in ``[0, 1]`` per image ``control`` kept
        (asked before each pass) out."""
        ...


class TextToImageModel(Protocol):
    """What the generate worker and route call (``models.dit.pipeline.TextToImage``)."""

    @property
    def defaults(self) -> GenerateDefaults: ...

    def warm_up(self) -> float:
        """Run a small request once (lazy initialisation off the first client's clock);
        the seconds it took."""
        ...

    def describe(self) -> dict[str, Any]: ...

    def generate(
        self,
        prompts: list[str],
        *,
        negative_prompts: list[str | None] | None = None,
        steps: int | None = None,
        guidance_scale: float | None = None,
        seeds: list[int] | None = None,
        sampler: str | None = None,
        plan_layout: bool | None = None,
        control: StepControl | None = None,
    ) -> Tensor:
        """One ``(3, H, W)`` image in ``[0, 1]`` per prompt ``control`` kept (asked before
        each sampler step), as ``(N', 3, H, W)``."""
        ...

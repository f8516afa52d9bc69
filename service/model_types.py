"""The typed boundary between the service and the models: what the workers call.

The service holds models only through these protocols (structural: the real
``StyleTransfer`` and ``TextToImage`` and the tests' fakes all satisfy them), so a route
or a worker never reads a model attribute by name.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Protocol, Unpack

from torch import Tensor

from models.adain.large import Step
from models.adain.options import StyleKeywords
from models.control import StepControl
from models.disk_picture import DiskPicture, Picture
from models.dit.options import GenerateDefaults, GenerateOptions, SampleKeywords
from models.shapes.understand import Understanding
from models.temporal import StageBlend

__all__ = [
    "BatchJob",
    "GenerateDefaults",
    "GenerateOptions",
    "PrintSession",
    "ServedModel",
    "StyleTransferModel",
    "TextToImageModel",
    "Understanding",
]


class BatchJob(Protocol):
    """A unit of work for a worker pool: jobs with equal keys share a forward."""

    def batch_key(self) -> Hashable: ...

    def cost(self) -> float:
        """The job's share of the per-batch memory budget (pixels)."""
        ...


class ServedModel(Protocol):
    """What the service asks of every model it loads."""

    def describe(self) -> dict[str, Any]:
        """What is loaded, as JSON (``/v1/models``; the weight files it names are hashed
        for provenance)."""
        ...

    def warm_up(self) -> float:
        """Run a small request once (lazy initialisation off the first client's clock);
        the seconds it took."""
        ...


class PrintSession(Protocol):
    """A print-size stylisation of one photo, run step by step
    (``models.adain.large.PrintStylization``): the steps of a phase may run in any order
    or at once, each phase after the one before is accepted."""

    @property
    def steps(self) -> int:
        """Steps in all (what progress counts)."""
        ...

    def phases(self) -> list[list[Step]]: ...

    def run_step(self, model: Any, step: Step) -> Tensor:
        """Compute ``step`` on ``model`` (a worker thread); writes nothing."""
        ...

    def accept(self, step: Step, result: Tensor) -> None:
        """Take a step's result in (one thread at a time, in phase order)."""
        ...

    def result(self) -> DiskPicture:
        """The painted photo ``(3, H, W)`` uint8 on disk, once every step is accepted."""
        ...


class StyleTransferModel(ServedModel, Protocol):
    """What the stylize worker calls (``models.adain.StyleTransfer``)."""

    def print_stylization(
        self, content: Picture, styles: Sequence[Tensor], **keywords: Unpack[StyleKeywords]
    ) -> PrintSession:
        """A print-size stylisation of ``content`` ``(3, H, W)`` (uint8 or float in [0, 1])
        larger than ``models.adain.presets.BASE_SIDE``; ``keywords``: the stylisation's
        options (``models.adain.options.StyleOptions``)."""
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
        masks: Sequence[Tensor] | None = None,
        control: StepControl | None = None,
        blend: StageBlend | None = None,
        **keywords: Unpack[StyleKeywords],
    ) -> Tensor:
        """``(B, 3, H, W)`` in, one ``(3, H, W)`` in ``[0, 1]`` per image ``control`` kept
        (asked before each pass) out; ``blend``: the images are a clip's consecutive
        frames (``models.temporal.StageBlend``); ``keywords``: as for
        :meth:`print_stylization`."""
        ...


class TextToImageModel(ServedModel, Protocol):
    """What the generate worker and work call (``models.dit.pipeline.TextToImage``)."""

    @property
    def defaults(self) -> GenerateDefaults: ...

    @property
    def image_size(self) -> int:
        """Side of the square images :meth:`sample` returns, in pixels."""
        ...

    def understand(self, prompt: str) -> Understanding:
        """What :meth:`sample` draws for ``prompt`` (its caption, ignored words and the
        things the model never learned), read once per request."""
        ...

    def sample(
        self,
        prompts: Sequence[Understanding],
        options: GenerateOptions,
        **keywords: Unpack[SampleKeywords],
    ) -> Tensor:
        """One ``(3, H, W)`` image in ``[0, 1]`` per read prompt ``control`` kept (asked
        before each sampler step), as ``(N', 3, H, W)``; ``options`` are used as given;
        ``keywords``: negative prompts, seeds, a step control
        (``models.dit.options.SampleKeywords``)."""
        ...

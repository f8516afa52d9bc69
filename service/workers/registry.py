"""The models the service knows by name: how to load each, run a batch, describe it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from models.control import StepControl
from service.workers.style_transfer import load_style_transfer, run_stylize, style_transfer_details
from service.workers.text_to_image import load_text_to_image, run_generate, text_to_image_details

ModelT = TypeVar("ModelT")


@dataclass(frozen=True)
class ModelEntry(Generic[ModelT]):
    """How to load a model, run one batch of its jobs, and describe it.

    ``details(model)`` is JSON: ``/v1/models`` shows it, and workers publish it so a
    replica that does not load the model can still validate requests for it.
    """

    name: str
    load: Callable[[Sequence[Path], str], ModelT]
    run: Callable[[ModelT, list, StepControl], list]
    details: Callable[[ModelT], dict[str, Any]] = lambda model: model.describe()


MODELS: dict[str, ModelEntry] = {
    "adain": ModelEntry("adain", load_style_transfer, run_stylize, style_transfer_details),
    "dit": ModelEntry("dit", load_text_to_image, run_generate, text_to_image_details),
}

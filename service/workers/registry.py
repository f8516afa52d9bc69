"""The models the service knows by name: how to load each, run a batch, describe it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeAlias, TypeVar

from service.model_types import BatchJob, ServedModel
from service.workers.pool import RunBatch
from service.workers.style_transfer import (
    load_style_transfer,
    run_stylize,
    style_transfer_details,
)
from service.workers.text_to_image import load_text_to_image, run_generate, text_to_image_details

ModelT = TypeVar("ModelT", bound=ServedModel)
JobT = TypeVar("JobT", bound=BatchJob)


def describe(model: ServedModel) -> dict[str, Any]:
    """A model's details: what its ``describe()`` says."""
    return model.describe()


@dataclass(frozen=True)
class ModelEntry(Generic[ModelT, JobT]):
    """How to load a model, run one batch of its jobs, and describe it.

    ``details(model)`` is JSON: ``/v1/models`` shows it, and workers publish it so a
    replica that does not load the model can still validate requests for it.
    """

    name: str
    load: Callable[[Sequence[Path], str], ModelT]
    run: RunBatch[ModelT, JobT]
    details: Callable[[ModelT], dict[str, Any]] = describe


#: An entry of some model kind: the registry maps names (from the settings) to entries of
#: different model and job types, so a name's kind is known at run time only.
AnyModelEntry: TypeAlias = ModelEntry[Any, Any]

MODELS: dict[str, AnyModelEntry] = {
    "adain": ModelEntry("adain", load_style_transfer, run_stylize, style_transfer_details),
    "dit": ModelEntry("dit", load_text_to_image, run_generate, text_to_image_details),
}

"""The text-to-image model kind: its job type, loader, batched forward and details."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from models.control import StepControl
from service.model_types import GenerateOptions, TextToImageModel, Understanding


@dataclass(frozen=True)
class GenerateJob:
    """One image to generate (a request for n images is n jobs with seeds s, s+1, ...);
    the prompt as the model read it, once per request (``TextToImageModel.understand``);
    ``size``: the side of the model's square images (``TextToImageModel.image_size``)."""

    prompt: Understanding
    negative_prompt: str | None
    seed: int
    options: GenerateOptions
    size: int

    def batch_key(self) -> Hashable:
        return self.options

    def cost(self) -> float:
        """The image's pixels, as a stylisation counts its own (small next to any)."""
        return float(self.size * self.size)


def load_text_to_image(search_path: Sequence[Path], device: str) -> TextToImageModel:
    from models.dit.pipeline import TextToImage

    return TextToImage.from_pretrained(search_path, device=device)


def run_generate(
    model: TextToImageModel, jobs: list[GenerateJob], control: StepControl | None = None
) -> list[torch.Tensor]:
    """One ``model.sample`` call for compatible jobs (equal options); one ``(3, H, W)``
    per job that ``control`` kept (every job without one)."""
    images = model.sample(
        [job.prompt for job in jobs],
        jobs[0].options,
        negative_prompts=[job.negative_prompt for job in jobs],
        seeds=[job.seed for job in jobs],
        control=control,
    )
    return list(images.float().cpu().unbind(0))


def text_to_image_details(model: TextToImageModel) -> dict[str, Any]:
    """``describe()`` plus what a replica without the model needs to validate requests:
    the defaults and the image size."""
    return {
        **model.describe(),
        "defaults": asdict(model.defaults),
        "image_size": model.image_size,
    }


def image_parameters(
    prompt: str,
    negative_prompt: str | None,
    options: GenerateOptions,
    understanding: Understanding,
    provenance: dict[str, Any],
) -> dict[str, Any]:
    """What a generated PNG records in its text chunks (each image adds its ``seed``): the
    request as resolved, what the model understood, and which model and weights drew it
    (``provenance``: ``model`` and ``checkpoint_sha256``). The service and the CLI both
    write these, so an image says how to make it again whichever made it."""
    return {
        "prompt": prompt,
        "negative_prompt": negative_prompt,
        **asdict(options),
        "understood": understanding.caption,
        **provenance,
    }

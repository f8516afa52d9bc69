"""The text-to-image model kind: its job type, loader, batched forward and details."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from models.control import StepControl
from service.model_types import GenerateOptions, TextToImageModel


@dataclass(frozen=True)
class GenerateJob:
    """One image to generate (a request for n images is n jobs with seeds s, s+1, ...)."""

    prompt: str
    negative_prompt: str | None
    seed: int
    options: GenerateOptions

    def batch_key(self) -> Hashable:
        return self.options

    def cost(self) -> float:
        """One image of the model's native size: small next to any stylisation."""
        return 32 * 32


def load_text_to_image(search_path: Sequence[Path], device: str) -> TextToImageModel:
    from models.dit.pipeline import TextToImage

    return TextToImage.from_pretrained(search_path, device=device)


def run_generate(
    model: TextToImageModel, jobs: list[GenerateJob], control: StepControl | None = None
) -> list[torch.Tensor]:
    """One ``model.generate`` call for compatible jobs; one ``(3, H, W)`` per job that
    ``control`` kept (every job without one)."""
    options = jobs[0].options
    images = model.generate(
        [job.prompt for job in jobs],
        negative_prompts=[job.negative_prompt for job in jobs],
        steps=options.steps,
        guidance_scale=options.guidance_scale,
        seeds=[job.seed for job in jobs],
        sampler=options.sampler,
        plan_layout=options.plan_layout,
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

"""Text-to-image work: ``n`` images of one prompt, run on the DiT's pool."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch

from models.dit.options import GenerateOptions
from models.images import encode_image
from service.execution.work import RunContext, Work
from service.jobs.records import JobResult, pack
from service.model_types import TextToImageModel
from service.workers.pool import WorkerPool, all_or_nothing
from service.workers.text_to_image import GenerateJob, image_parameters


@dataclass(frozen=True)
class GenerateWork(Work):
    """``n`` images of one prompt with seeds ``s, s+1, ...``, options resolved."""

    kind: ClassVar[str] = "generate"
    model: ClassVar[str] = "dit"

    @property
    def unit(self) -> str:
        return "sampler step"

    prompt: str
    negative_prompt: str | None
    seeds: tuple[int, ...]
    options: GenerateOptions

    @property
    def parts(self) -> int:
        return len(self.seeds)

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "negative_prompt": self.negative_prompt,
            **asdict(self.options),
            "seeds": list(self.seeds),
        }

    def to_payload(self) -> bytes:
        return pack(
            {
                "kind": self.kind,
                "prompt": self.prompt,
                "negative_prompt": self.negative_prompt,
                "seeds": list(self.seeds),
                "options": asdict(self.options),
            }
        )

    @classmethod
    def from_payload(cls, header: dict[str, Any], blobs: list[bytes]) -> GenerateWork:
        return cls(
            header["prompt"],
            header["negative_prompt"],
            tuple(header["seeds"]),
            GenerateOptions(**header["options"]),
        )

    async def run(
        self, pool: WorkerPool[TextToImageModel, GenerateJob], context: RunContext
    ) -> JobResult:
        understanding = pool.model.understand(self.prompt)
        jobs = [
            GenerateJob(
                understanding, self.negative_prompt, seed, self.options, pool.model.image_size
            )
            for seed in self.seeds
        ]
        images = await all_or_nothing(*(context.submit(pool, job, i) for i, job in enumerate(jobs)))
        parameters = image_parameters(
            self.prompt, self.negative_prompt, self.options, understanding, pool.provenance()
        )
        pngs = await asyncio.to_thread(_encode_pngs, images, self.seeds, parameters)
        fields = {
            "seeds": list(self.seeds),
            **asdict(self.options),
            "understood": understanding.caption,
            "ignored": list(understanding.ignored),
            "not_learned": list(understanding.not_learned),
            "parameters": parameters,
        }
        return JobResult(pngs, "image/png", fields)


def _encode_pngs(
    images: list[torch.Tensor], seeds: tuple[int, ...], parameters: dict[str, Any]
) -> list[bytes]:
    return [
        encode_image(image, "png", parameters | {"seed": seed})[0]
        for image, seed in zip(images, seeds, strict=True)
    ]

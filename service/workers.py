"""Model workers: one batcher per model and device, requests routed to the least loaded.

A model joins the service with three things: a ``load(search_path, device)`` function,
a ``run(model, jobs) -> results`` function that does one batched forward, and a job
type whose ``batch_key()`` says which jobs may share that forward. ``MODELS`` lists
them; ``load_pools`` builds a ``WorkerPool`` for each one whose weights load.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from service.batching import Batcher, is_out_of_memory
from service.config import Settings
from service.errors import BadRequest, Overloaded
from service.metrics import Metrics

logger = logging.getLogger("atelier.workers")


# ---------------------------------------------------------------- style transfer
@dataclass(frozen=True, eq=False)
class StylizeJob:
    """One stylize request, decoded and resized.

    Shape:
        - content: ``(3, H, W)`` in [0, 1]
        - styles: each ``(3, h_i, w_i)``
        - masks: each ``(1, H, W)``, or ``None``
    """

    content: torch.Tensor
    styles: tuple[torch.Tensor, ...]
    style_weights: tuple[float, ...] | None = None
    alpha: float = 1.0
    preserve_color: bool = False
    masks: tuple[torch.Tensor, ...] | None = None
    preset: str = "quality"

    def batch_key(self) -> Hashable:
        """Jobs with equal keys stack into one forward: same sizes, same options."""
        return (
            self.preset,
            tuple(self.content.shape),
            tuple(tuple(style.shape) for style in self.styles),
            self.style_weights,
            self.alpha,
            self.preserve_color,
            None if self.masks is None else len(self.masks),
        )


def load_style_transfer(search_path: Sequence[Path], device: str) -> Any:
    """The default AdaIN model on its fast path (bf16 + channels_last where the device has
    native bf16 kernels, else float32): ~2.4x faster on the CPU at +0.6 % style loss
    (``benchmarks/adain_bench.py``), and its per-image cost falls with the batch size."""
    from models.adain import StyleTransfer

    return StyleTransfer.from_pretrained(search_path, device=device, fast=True)


def run_stylize(model: Any, jobs: list[StylizeJob]) -> list[torch.Tensor]:
    """Stack compatible jobs into one ``model.stylize`` call; one ``(3, H, W)`` per job."""
    first = jobs[0]
    content = torch.stack([job.content for job in jobs])
    styles = [torch.stack([job.styles[i] for job in jobs]) for i in range(len(first.styles))]
    masks = None
    if first.masks is not None:
        masks = [torch.stack([job.masks[i] for job in jobs]) for i in range(len(first.masks))]
    output = model.stylize(
        content,
        styles,
        style_weights=first.style_weights,
        alpha=first.alpha,
        preserve_color=first.preserve_color,
        masks=masks,
        preset=first.preset,
    )
    return list(output.float().cpu().unbind(0))


# --------------------------------------------------------------- text-to-image
@dataclass(frozen=True)
class GenerateJob:
    """One image to generate (a request for n images is n jobs with seeds s, s+1, ...)."""

    prompt: str
    negative_prompt: str | None
    steps: int
    guidance_scale: float
    seed: int
    sampler: str
    plan_layout: bool = True

    def batch_key(self) -> Hashable:
        return (self.steps, self.guidance_scale, self.sampler, self.plan_layout)


def load_text_to_image(search_path: Sequence[Path], device: str) -> Any:
    from models.dit.pipeline import TextToImage

    return TextToImage.from_pretrained(search_path, device=device)


def run_generate(model: Any, jobs: list[GenerateJob]) -> list[torch.Tensor]:
    """One ``model.generate`` call for compatible jobs; one ``(3, H, W)`` per job."""
    first = jobs[0]
    images = model.generate(
        [job.prompt for job in jobs],
        negative_prompts=[job.negative_prompt for job in jobs],
        steps=first.steps,
        guidance_scale=first.guidance_scale,
        seeds=[job.seed for job in jobs],
        sampler=first.sampler,
        plan_layout=first.plan_layout,
    )
    return list(images.float().cpu().unbind(0))


# -------------------------------------------------------------------- registry
@dataclass(frozen=True)
class ModelEntry:
    """How to load a model and run one batch of its jobs."""

    name: str
    load: Callable[[Sequence[Path], str], Any]
    run: Callable[[Any, list], list]


MODELS: dict[str, ModelEntry] = {
    "adain": ModelEntry("adain", load_style_transfer, run_stylize),
    "dit": ModelEntry("dit", load_text_to_image, run_generate),
}


class WorkerPool:
    """The batchers of one model, one per device; ``submit`` picks the least loaded."""

    def __init__(
        self,
        name: str,
        models: Mapping[str, Any],
        run: Callable[[Any, list], list],
        settings: Settings,
        metrics: Metrics,
    ) -> None:
        if not models:
            raise ValueError(f"{name}: a pool needs at least one device")
        self.name = name
        self.models = dict(models)
        self.batchers = {
            device: Batcher(
                partial(run, model),
                max_batch_size=settings.max_batch_size,
                max_wait_s=settings.max_batch_wait_ms / 1000.0,
                queue_size=settings.queue_size,
                observer=metrics.batch_observer(name, device),
                name=f"{name}-{device}",
            )
            for device, model in self.models.items()
        }

    @property
    def model(self) -> Any:
        """The model on the first device (for its attributes: samplers, defaults)."""
        return next(iter(self.models.values()))

    @property
    def devices(self) -> list[str]:
        return list(self.batchers)

    def start(self) -> None:
        for batcher in self.batchers.values():
            batcher.start()

    async def close(self) -> None:
        await asyncio.gather(*(batcher.close() for batcher in self.batchers.values()))

    async def submit(self, job: Any, *, timeout_s: float | None = None) -> Any:
        """Run ``job`` on the least-loaded device and return its result.

        Model errors become API errors: a ``ValueError`` (input the model refused) is a
        400; an out-of-memory on a single item is a 429 with ``Retry-After``.
        """
        batcher = min(self.batchers.values(), key=lambda b: b.load)
        try:
            return await batcher.submit(job, key=job.batch_key(), timeout_s=timeout_s)
        except ValueError as exc:
            raise BadRequest(f"{self.name}: {exc}", code="rejected_by_model") from exc
        except RuntimeError as exc:
            if is_out_of_memory(exc):
                raise Overloaded(f"{self.name}: out of memory, retry later") from exc
            raise


@dataclass
class ModelStatus:
    """What ``/v1/models`` and ``/readyz`` report for one requested model."""

    name: str
    loaded: bool
    devices: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "loaded": self.loaded,
            "devices": self.devices,
            "details": self.details,
            "error": self.error,
        }


def requested_models(settings: Settings) -> list[str]:
    return [name.strip() for name in settings.load_models.split(",") if name.strip()]


def load_models(
    settings: Settings, entries: Mapping[str, ModelEntry]
) -> tuple[dict[str, dict[str, Any]], dict[str, ModelStatus]]:
    """Load every requested model on every device (blocking: call it off the loop).

    A model that fails to load (missing weights, module not built) is logged and
    reported as not loaded; the others still serve.

    Returns:
        ``({name: {device: model}}, {name: status})``.
    """
    devices = settings.device_list()
    loaded: dict[str, dict[str, Any]] = {}
    statuses: dict[str, ModelStatus] = {}
    for name in requested_models(settings):
        entry = entries.get(name)
        if entry is None:
            error = f"unknown model {name!r}; known: {sorted(entries)}"
            logger.error("model not loaded", extra={"model": name, "error": error})
            statuses[name] = ModelStatus(name, loaded=False, error=error)
            continue
        try:
            per_device = {
                device: entry.load(settings.weight_search_path(), device) for device in devices
            }
        except Exception as exc:  # a missing model must not take the service down
            error = f"{type(exc).__name__}: {exc}"
            logger.warning("model not loaded", extra={"model": name, "error": error})
            statuses[name] = ModelStatus(name, loaded=False, error=error)
            continue
        first = next(iter(per_device.values()))
        details = first.describe() if hasattr(first, "describe") else {}
        loaded[name] = per_device
        statuses[name] = ModelStatus(name, loaded=True, devices=devices, details=details)
        logger.info("model loaded", extra={"model": name, "devices": devices})
    return loaded, statuses


def build_pools(
    loaded: Mapping[str, Mapping[str, Any]],
    entries: Mapping[str, ModelEntry],
    settings: Settings,
    metrics: Metrics,
) -> dict[str, WorkerPool]:
    return {
        name: WorkerPool(name, models, entries[name].run, settings, metrics)
        for name, models in loaded.items()
    }

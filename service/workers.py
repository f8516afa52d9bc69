"""Model workers: one batcher per model and device, requests routed to the least loaded.

A model joins the service with three things: a ``load(search_path, device)`` function,
a ``run(model, jobs) -> results`` function that does one batched forward, and a job
type whose ``batch_key()`` says which jobs may share that forward and whose ``cost()``
(pixels) counts against the per-batch memory budget. ``MODELS`` lists them;
``build_pools`` builds a ``WorkerPool`` for each one whose weights load.

Each pool has two batchers per device: interactive work (a client waiting on its
connection) and background work (async jobs). Both share the device's ``DeviceGate``
with every other pool on that device, so background batches yield the device at their
step boundaries while interactive work runs (``service.batching``).

The service sees the models only through the protocols of ``service.model_types``.
This module is where torch meets the generic batcher: forwards run under
``torch.inference_mode()``, out-of-memory errors split batches, and the batcher's
errors become API errors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Generic, TypeVar, get_args

import torch

from models.adain.presets import PresetName
from models.control import StepControl
from service.batching import (
    Batcher,
    Closed,
    DeadlineExceeded,
    DeviceGate,
    ProgressCallback,
    QueueFull,
)
from service.config import Settings
from service.errors import DeadlineExceeded as DeadlineExceededError
from service.errors import Overloaded, RejectedByModel, ShuttingDown
from service.jobs.records import BACKGROUND, INTERACTIVE, PRIORITIES
from service.metrics import Metrics
from service.model_types import (
    BatchJob,
    GenerateOptions,
    StyleTransferModel,
    TextToImageModel,
)

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
    style_scale: float = 1.0

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
            self.style_scale,
        )

    def cost(self) -> float:
        """Pixels through the encoder: the content and every style."""
        return sum(image.shape[-2] * image.shape[-1] for image in (self.content, *self.styles))


def load_style_transfer(search_path: Sequence[Path], device: str) -> StyleTransferModel:
    """The default AdaIN model on its fast path (bf16 + channels_last where the device has
    native bf16 kernels, else float32): ~2.4x faster on the CPU at +0.6 % style loss
    (``benchmarks/adain_bench.py``), and its per-image cost falls with the batch size."""
    from models.adain import StyleTransfer

    return StyleTransfer.from_pretrained(search_path, device=device, fast=True)


def run_stylize(
    model: StyleTransferModel, jobs: list[StylizeJob], control: StepControl | None = None
) -> list[torch.Tensor]:
    """Stack compatible jobs into one ``model.stylize`` call; one ``(3, H, W)`` per job
    that ``control`` kept (every job without one)."""
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
        style_scale=first.style_scale,
        control=control,
    )
    return list(output.float().cpu().unbind(0))


# --------------------------------------------------------------- text-to-image
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


# -------------------------------------------------------------------- registry
ModelT = TypeVar("ModelT")


def style_transfer_details(model: StyleTransferModel) -> dict[str, Any]:
    """``describe()`` plus what a replica without the model needs to bound a request's
    cost: each preset's work in full-size passes."""
    return {
        **model.describe(),
        "full_size_passes": {name: model.full_size_passes(name) for name in get_args(PresetName)},
    }


def text_to_image_details(model: TextToImageModel) -> dict[str, Any]:
    """``describe()`` plus what a replica without the model needs to validate requests:
    the defaults and the image size."""
    return {
        **model.describe(),
        "defaults": asdict(model.defaults),
        "image_size": model.image_size,
    }


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


def is_out_of_memory(exc: BaseException) -> bool:
    """True for CUDA (or other accelerator) out-of-memory errors."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def release_memory() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _inference(
    run: Callable[[ModelT, list, StepControl], list],
    model: ModelT,
    jobs: list,
    control: StepControl,
) -> list:
    with torch.inference_mode():
        return run(model, jobs, control)


MODELS: dict[str, ModelEntry] = {
    "adain": ModelEntry("adain", load_style_transfer, run_stylize, style_transfer_details),
    "dit": ModelEntry("dit", load_text_to_image, run_generate, text_to_image_details),
}


def _job_cost(job: BatchJob) -> float:
    return job.cost()


class WorkerPool(Generic[ModelT]):
    """The batchers of one model: per device, one for interactive and one for background
    work; ``submit`` picks the least loaded device.

    Args:
        gates: one ``DeviceGate`` per device, shared by every pool on that device (a
            fresh one per device when not given).
    """

    def __init__(
        self,
        name: str,
        models: Mapping[str, ModelT],
        run: Callable[[ModelT, list, StepControl], list],
        settings: Settings,
        metrics: Metrics,
        gates: Mapping[str, DeviceGate] | None = None,
    ) -> None:
        if not models:
            raise ValueError(f"{name}: a pool needs at least one device")
        self.name = name
        self.models = dict(models)
        #: the model's details (``ModelEntry.details``), filled by ``build_pools``
        self.details: dict[str, Any] = {}
        gates = gates or {device: DeviceGate() for device in self.models}
        self.batchers = {
            device: {
                priority: Batcher(
                    partial(_inference, run, model),
                    max_batch_size=settings.max_batch_size,
                    max_wait_s=settings.max_batch_wait_ms / 1000.0,
                    queue_size=settings.queue_size,
                    observer=metrics.batch_observer(name, device, priority),
                    name=f"{name}-{device}-{priority}",
                    is_out_of_memory=is_out_of_memory,
                    release_memory=release_memory,
                    cost=_job_cost,
                    max_batch_cost=settings.max_batch_pixels,
                    gate=gates[device],
                    background=priority == BACKGROUND,
                )
                for priority in PRIORITIES
            }
            for device, model in self.models.items()
        }

    @property
    def model(self) -> ModelT:
        """The model on the first device (for what is the same on all: its defaults)."""
        return next(iter(self.models.values()))

    def model_parameters(self) -> dict[str, Any]:
        """The model's own settings that shape a result (e.g. AdaIN's levels)."""
        return {
            key: self.details[key] for key in ("levels", "mode", "dtype") if key in self.details
        }

    def provenance(self) -> dict[str, Any]:
        """Which model and weights made a result (goes into PNG text chunks and JSON)."""
        return {"model": self.name, "checkpoint_sha256": self.details.get("checkpoint_sha256", {})}

    @property
    def devices(self) -> list[str]:
        return list(self.batchers)

    def _all(self) -> list[Batcher]:
        return [b for per_device in self.batchers.values() for b in per_device.values()]

    def start(self) -> None:
        for batcher in self._all():
            batcher.start()

    async def close(self) -> None:
        await asyncio.gather(*(batcher.close() for batcher in self._all()))

    async def submit(
        self,
        job: BatchJob,
        *,
        priority: str = INTERACTIVE,
        timeout_s: float | None = None,
        on_progress: ProgressCallback | None = None,
        owner: str = "",
    ) -> torch.Tensor:
        """Run ``job`` on the least-loaded device and return its result.

        ``on_progress(done, total)`` hears of each step (from the worker thread).
        Cancelling the awaiting task stops the job: dropped from the queue, or from its
        running batch at the next step. ``owner`` is whose work it is (fair share).

        Batcher and model errors become API errors: a full queue or an out-of-memory on a
        single item is a 429 with ``Retry-After``, a closed batcher a 503, a missed
        deadline a 504, a ``ValueError`` (input the model refused) a 400.
        """
        device = min(self.batchers, key=lambda d: sum(b.load for b in self.batchers[d].values()))
        batcher = self.batchers[device][priority]
        try:
            return await batcher.submit(
                job,
                key=job.batch_key(),
                timeout_s=timeout_s,
                on_progress=on_progress,
                owner=owner,
            )
        except QueueFull as exc:
            raise Overloaded(str(exc), retry_after_s=exc.retry_after_s) from exc
        except Closed as exc:
            raise ShuttingDown("the service is shutting down") from exc
        except DeadlineExceeded as exc:
            raise DeadlineExceededError(str(exc)) from exc
        except ValueError as exc:
            raise RejectedByModel(f"{self.name}: {exc}") from exc
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
    """Load every requested model on every device and warm it up (one small request, so
    that lazy initialisation, a CUDA context, cuDNN's choices and the allocator's pools,
    is not paid by the first client); blocking: call it off the loop.

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
        warm_up_s = sum(model.warm_up() for model in per_device.values())
        first = next(iter(per_device.values()))
        details = entry.details(first)
        details["checkpoint_sha256"] = checkpoint_hashes(details)
        loaded[name] = per_device
        statuses[name] = ModelStatus(name, loaded=True, devices=devices, details=details)
        logger.info(
            "model loaded and warmed up",
            extra={"model": name, "devices": devices, "warm_up_s": round(warm_up_s, 3)},
        )
    return loaded, statuses


def checkpoint_hashes(details: Mapping[str, Any]) -> dict[str, str]:
    """sha256 of each weight file a model reports (``source`` or ``weight_files``), by
    file name: what generated images record as their provenance."""
    from models.hub import sha256_of

    paths = [details["source"]] if details.get("source") else []
    paths += list(details.get("weight_files") or [])
    return {Path(p).name: sha256_of(p) for p in paths if Path(p).is_file()}


def build_pools(
    loaded: Mapping[str, Mapping[str, Any]],
    entries: Mapping[str, ModelEntry],
    settings: Settings,
    metrics: Metrics,
    statuses: Mapping[str, ModelStatus] | None = None,
) -> dict[str, WorkerPool]:
    """One pool per loaded model; pools on the same device share its ``DeviceGate``."""
    gates: dict[str, DeviceGate] = {}
    pools = {}
    for name, models in loaded.items():
        for device in models:
            gates.setdefault(device, DeviceGate())
        pool = WorkerPool(name, models, entries[name].run, settings, metrics, gates)
        status = (statuses or {}).get(name)
        if status is not None:
            pool.details = dict(status.details)
        pools[name] = pool
    return pools

"""Prepared requests: what a validated request asks a model to do, runnable anywhere.

A route validates a request once and turns it into a :class:`Work` (``GenerateWork``,
``StylizeWork``). The same object then runs in one of two ways:

* here, at once, on this process's worker pool (a synchronous request where the model
  is loaded): :meth:`Work.run`;
* as a job: :meth:`Work.to_payload` gives the bytes the job store keeps (decoded
  images travel as 8-bit PNGs, never as float tensors), and the worker that claims the
  job rebuilds the work with :func:`service.jobs.kinds.work_from_payload` and runs it.

Either way the answer is a :class:`~service.jobs.records.JobResult`. Uploads are decoded
to 8-bit RGB once by the route; an 8-bit source survives the PNG round trip exactly, so
a job gives the same images as the synchronous request, and a rerun of a job after a
crash gives the same images as its first run.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, ClassVar, TypeVar

import torch
from PIL import Image

from models.adain.large import BASE_SIDE
from models.dit.options import GenerateOptions
from models.images import encode_image, mask_from_rgb, pil_to_uint8
from service.batching import DEADLINE
from service.errors import DeadlineExceeded
from service.jobs.records import JobResult, pack
from service.model_types import StyleTransferModel, TextToImageModel
from service.workers.pool import AnyWorkerPool, WorkerPool
from service.workers.style_transfer import PrintStep, StylizeItem, StylizeJob
from service.workers.text_to_image import GenerateJob, image_parameters

T = TypeVar("T")


class Progress:
    """Step progress of a job made of ``parts`` batcher items (e.g. one per image).

    Parts report ``(done, total)`` from the worker thread; the job's progress is the
    slowest part's, ``step`` of ``total``; ``notify`` is called after each report.
    """

    def __init__(self, parts: int, notify: Callable[[], None] = lambda: None) -> None:
        self._done = [0] * parts
        self._total = 0
        self._lock = threading.Lock()
        self._notify = notify

    def reporter(self, part: int) -> Callable[[int, int], None]:
        def report(done: int, total: int) -> None:  # worker thread
            with self._lock:
                self._done[part] = done
                self._total = total
            self._notify()

        return report

    def current(self) -> tuple[int, int]:
        """``(step, total)``: the slowest part's step."""
        with self._lock:
            return min(self._done, default=0), self._total


#: Print-size steps of one job submitted at once: two keep a device busy between them
#: (the next is queued while one runs) without holding a queue's places.
STEPS_IN_FLIGHT = 2

#: Bytes above which (de)serializing a job's input or result runs off the event loop.
OFF_LOOP_BYTES = 256 * 1024


async def off_loop_if_large(size: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, on a worker thread when ``size`` bytes make it worth the hop."""
    if size > OFF_LOOP_BYTES:
        return await asyncio.to_thread(fn, *args)
    return fn(*args)


async def all_or_nothing(*works: Awaitable[T]) -> list[T]:
    """Await every ``work``; the first failure cancels the others and is raised (so one
    image past its deadline stops its siblings too, counted as a deadline)."""
    tasks = [asyncio.ensure_future(work) for work in works]
    try:
        return list(await asyncio.gather(*tasks))
    except DeadlineExceeded:
        for task in tasks:
            task.cancel(DEADLINE)
        raise
    finally:
        for task in tasks:
            task.cancel()


class Checkpoint(ABC):
    """A running job's checkpoints (``JobStore.put_checkpoint``): what a long job saves
    as it goes, for the next worker to resume from if this one is lost.

    ``resumed_from``: set by the work when it resumed (what it found done)."""

    resumed_from: int = 0

    @abstractmethod
    async def load(self, name: str) -> bytes | None:
        """The checkpoint ``name``, or ``None`` (never saved, or the store is away)."""

    @abstractmethod
    async def save(self, name: str, data: bytes) -> bool:
        """Keep ``data`` as ``name``; False when the store did not take it (the work
        then saves nothing more in this run)."""


class Work(ABC):
    """A validated request for one model; see the module docstring."""

    kind: ClassVar[str]
    model: ClassVar[str]
    #: Only ever a job, with the longer deadline ``video_job_timeout_s``.
    long: ClassVar[bool] = False

    @property
    @abstractmethod
    def unit(self) -> str:
        """What one progress step is, for clients."""

    @property
    @abstractmethod
    def parts(self) -> int:
        """Batcher items the work is split into (progress follows the slowest)."""

    @property
    @abstractmethod
    def parameters(self) -> dict[str, Any]:
        """How the result will be made, as the job shows it before it runs."""

    @abstractmethod
    def to_payload(self) -> bytes: ...

    @classmethod
    @abstractmethod
    def from_payload(cls, header: dict[str, Any], blobs: list[bytes]) -> Work: ...

    @abstractmethod
    async def run(
        self,
        pool: AnyWorkerPool,
        *,
        priority: str,
        timeout_s: float | None,
        progress: Progress | None,
        owner: str,
        checkpoint: Checkpoint | None = None,
    ) -> JobResult:
        """Run on ``pool``, the pool of ``model`` (its items go to the ``priority``
        batcher), and encode the answer off the event loop; ``checkpoint``: the job's,
        when it runs as one (a long work saves its progress there, and resumes)."""


# --------------------------------------------------------------- text-to-image
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
        self,
        pool: WorkerPool[TextToImageModel, GenerateJob],
        *,
        priority: str,
        timeout_s: float | None,
        progress: Progress | None,
        owner: str,
        checkpoint: Checkpoint | None = None,
    ) -> JobResult:
        understanding = pool.model.understand(self.prompt)
        jobs = [
            GenerateJob(understanding, self.negative_prompt, seed, self.options)
            for seed in self.seeds
        ]
        images = await all_or_nothing(
            *(
                pool.submit(
                    job,
                    priority=priority,
                    timeout_s=timeout_s,
                    on_progress=None if progress is None else progress.reporter(i),
                    owner=owner,
                )
                for i, job in enumerate(jobs)
            )
        )
        parameters = image_parameters(
            self.prompt, self.negative_prompt, self.options, understanding, pool.provenance()
        )
        pngs = await asyncio.to_thread(_encode_pngs, images, self.seeds, parameters)
        fields = {
            "seeds": list(self.seeds),
            **asdict(self.options),
            "understood": understanding.caption,
            "ignored": list(understanding.ignored),
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


# ---------------------------------------------------------------- style transfer
def _to_float(image: torch.Tensor) -> torch.Tensor:
    """``(3, H, W)`` uint8 (any strides) -> contiguous float32 in [0, 1], one copy."""
    out = torch.empty(image.shape, dtype=torch.float32)
    return out.copy_(image).div_(255.0)


def _png(image: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image.permute(1, 2, 0).numpy()).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def _unpng(data: bytes) -> torch.Tensor:
    with Image.open(io.BytesIO(data)) as image:
        return pil_to_uint8(image)


@dataclass(frozen=True, eq=False)
class StylizeWork(Work):
    """One stylisation: decoded 8-bit images and the options.

    Shape:
        - content: ``(3, H, W)`` uint8
        - styles: each ``(3, h_i, w_i)`` uint8
        - masks: each ``(3, H, W)`` uint8 (read as their channel mean), or ``None``
    """

    kind: ClassVar[str] = "stylize"
    model: ClassVar[str] = "adain"

    content: torch.Tensor
    styles: tuple[torch.Tensor, ...]
    masks: tuple[torch.Tensor, ...] | None
    options: dict[str, Any]  # style_weights, alpha, preserve_color, preset, style_scale
    format: str
    request_parameters: dict[str, Any]
    quality: int | None = None  # JPEG's and WebP's

    @property
    def parts(self) -> int:
        return 1

    @property
    def print_size(self) -> bool:
        """Larger than the base: painted by print-size steps (``models.adain.large``)."""
        return max(self.content.shape[-2:]) > BASE_SIDE

    @property
    def unit(self) -> str:
        """AdaIN passes; a print-size job counts tiles (its base and each octave's
        statistics count one tile each)."""
        return "tile" if self.print_size else "pass"

    @property
    def parameters(self) -> dict[str, Any]:
        return self.request_parameters

    def job(self) -> StylizeJob:
        weights = self.options["style_weights"]
        return StylizeJob(
            content=_to_float(self.content),
            styles=tuple(_to_float(style) for style in self.styles),
            style_weights=None if weights is None else tuple(weights),
            alpha=self.options["alpha"],
            preserve_color=self.options["preserve_color"],
            masks=None
            if self.masks is None
            else tuple(mask_from_rgb(_to_float(mask)) for mask in self.masks),
            preset=self.options["preset"],
            style_scale=self.options.get("style_scale", 1.0),  # jobs queued before it existed
        )

    def to_payload(self) -> bytes:
        images = [self.content, *self.styles, *(self.masks or ())]
        header = {
            "kind": self.kind,
            "styles": len(self.styles),
            "masks": None if self.masks is None else len(self.masks),
            "options": self.options,
            "format": self.format,
            "quality": self.quality,
            "parameters": self.request_parameters,
        }
        return pack(header, [_png(image) for image in images])

    @classmethod
    def from_payload(cls, header: dict[str, Any], blobs: list[bytes]) -> StylizeWork:
        images = [_unpng(blob) for blob in blobs]
        styles = header["styles"]
        masks = None if header["masks"] is None else tuple(images[1 + styles :])
        return cls(
            images[0],
            tuple(images[1 : 1 + styles]),
            masks,
            header["options"],
            header["format"],
            header["parameters"],
            header.get("quality"),  # jobs stored before it existed
        )

    async def run(
        self,
        pool: WorkerPool[StyleTransferModel, StylizeItem],
        *,
        priority: str,
        timeout_s: float | None,
        progress: Progress | None,
        owner: str,
        checkpoint: Checkpoint | None = None,
    ) -> JobResult:
        if self.print_size:
            image = await self._run_print_size(pool, priority, timeout_s, progress, owner)
        else:
            image = await pool.submit(
                self.job(),
                priority=priority,
                timeout_s=timeout_s,
                on_progress=None if progress is None else progress.reporter(0),
                owner=owner,
            )
        parameters = {**self.request_parameters, **pool.provenance()}
        data, media_type = await asyncio.to_thread(
            partial(encode_image, quality=self.quality), image, self.format, parameters
        )
        return JobResult([data], media_type, {"parameters": parameters})

    async def _run_print_size(
        self,
        pool: WorkerPool[StyleTransferModel, StylizeItem],
        priority: str,
        timeout_s: float | None,
        progress: Progress | None,
        owner: str,
    ) -> torch.Tensor:
        """Every step of a print-size stylisation through the pool's batcher, phase by
        phase, ``STEPS_IN_FLIGHT`` at a time (other work cuts in between them); progress
        counts steps; a cancelled job stops at its next step. Returns ``(3, H, W)`` uint8."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        weights = self.options["style_weights"]
        session = await asyncio.to_thread(
            pool.model.print_stylization,
            self.content,
            [_to_float(style)[None] for style in self.styles],
            style_weights=None if weights is None else tuple(weights),
            alpha=self.options["alpha"],
            preserve_color=self.options["preserve_color"],
            preset=self.options["preset"],
            style_scale=self.options.get("style_scale", 1.0),
        )
        report = None if progress is None else progress.reporter(0)
        done = 0
        for phase in session.phases():
            for start in range(0, len(phase), STEPS_IN_FLIGHT):
                group = phase[start : start + STEPS_IN_FLIGHT]
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise DeadlineExceeded("the job's deadline passed")
                results = await all_or_nothing(
                    *(
                        pool.submit(
                            PrintStep(session, step),
                            priority=priority,
                            timeout_s=left,
                            owner=owner,
                        )
                        for step in group
                    )
                )
                for step, result in zip(group, results, strict=True):
                    await asyncio.to_thread(session.accept, step, result)
                done += len(group)
                if report is not None:
                    report(done, session.steps)
        return session.result()

"""The style-transfer model kind: its job type, loader and batched forward."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import torch

from models.adain.large import Step
from models.adain.options import StyleOptions
from models.adain.presets import PresetName
from models.adain.video import stylize_chunk
from models.control import StepControl, wanted_rows
from models.devices import to_host
from models.temporal import StageBlend
from service.model_types import PrintSession, StyleTransferModel


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
    options: StyleOptions = StyleOptions()
    masks: tuple[torch.Tensor, ...] | None = None

    def batch_key(self) -> Hashable:
        """Jobs with equal keys stack into one forward: same sizes, same options."""
        return (
            self.options,
            tuple(self.content.shape),
            tuple(tuple(style.shape) for style in self.styles),
            None if self.masks is None else len(self.masks),
        )

    def cost(self) -> float:
        """Pixels through the encoder: the content and every style."""
        return sum(image.shape[-2] * image.shape[-1] for image in (self.content, *self.styles))


@dataclass(frozen=True, eq=False)
class PrintStep:
    """One step of a print-size stylisation (the base, an octave's statistics or a group
    of its tiles): a batcher item of its own. Its key is its own, so it never shares a
    forward with another item: what it computes is fixed by the plan, never by how a
    batcher grouped it, so a rerun of the job gives the same image."""

    session: PrintSession
    step: Step

    def batch_key(self) -> Hashable:
        return ("print", id(self.session), self.step)

    def cost(self) -> float:
        """The step's output pixels (the base and the statistics count one)."""
        return float(max(1, self.step.pixels))


@dataclass(frozen=True, eq=False)
class VideoChunk:
    """A chunk of a clip's consecutive frames (``models.adain.video``): one batch of its
    own, never shared with another item (its frames are blended in order with the clip's
    state in ``blend``, which it carries on).

    Shape:
        - frames: ``(n, 3, H, W)`` uint8; styles: each ``(1, 3, h, w)`` in [0, 1].
    """

    frames: torch.Tensor
    styles: list[torch.Tensor]
    options: StyleOptions
    blend: StageBlend

    def batch_key(self) -> Hashable:
        return ("video", id(self))

    def cost(self) -> float:
        """The chunk's pixels."""
        count, _, height, width = self.frames.shape
        return float(count * height * width)


#: What the style-transfer pool runs: whole stylisations, print-size steps, video chunks.
StylizeItem = StylizeJob | PrintStep | VideoChunk


def load_style_transfer(search_path: Sequence[Path], device: str) -> StyleTransferModel:
    """The default AdaIN model on its fast path (bf16 + channels_last where the device has
    native bf16 kernels, else float32): ~2.4x faster on the CPU at +0.6 % style loss
    (``benchmarks/adain_bench.py``), and its per-image cost falls with the batch size."""
    from models.adain import StyleTransfer

    return StyleTransfer.from_pretrained(search_path, device=device, fast=True)


def run_stylize(
    model: StyleTransferModel, jobs: list[StylizeItem], control: StepControl | None = None
) -> list[torch.Tensor]:
    """Stack compatible jobs into one ``model.stylize`` call; one ``(3, H, W)`` per job
    that ``control`` kept (every job without one). A print-size step runs alone."""
    if isinstance(jobs[0], PrintStep):
        return _run_print_step(model, jobs[0], control)
    if isinstance(jobs[0], VideoChunk):
        return _run_video_chunk(model, jobs[0], control)
    stylize_jobs = [job for job in jobs if isinstance(job, StylizeJob)]  # all of them
    return _run_stylize_jobs(model, stylize_jobs, control)


def _run_stylize_jobs(
    model: StyleTransferModel, jobs: list[StylizeJob], control: StepControl | None
) -> list[torch.Tensor]:
    first = jobs[0]
    content = torch.stack([job.content for job in jobs])
    styles = [torch.stack([job.styles[i] for job in jobs]) for i in range(len(first.styles))]
    # every job has masks, the same number, or none (their count is in the batch key)
    per_job = [job.masks for job in jobs if job.masks is not None]
    masks = [torch.stack(column) for column in zip(*per_job, strict=True)] if per_job else None
    output = model.stylize(
        content,
        styles,
        masks=masks,
        control=control,
        **first.options.keywords(),
    )
    return list(to_host(output.float()).unbind(0))


def _run_print_step(
    model: StyleTransferModel, job: PrintStep, control: StepControl | None
) -> list[torch.Tensor]:
    """One print-size step as a one-step batch: ``control`` is asked before and after it
    (a step that is no longer wanted does not run, or its result is dropped)."""
    if _dropped(wanted_rows(control, 0, 1)):
        return []
    result = job.session.run_step(model, job.step)
    return [] if _dropped(wanted_rows(control, 1, 1)) else [result]


def _run_video_chunk(
    model: StyleTransferModel, chunk: VideoChunk, control: StepControl | None
) -> list[torch.Tensor]:
    """A clip's chunk as a one-item batch: its frames ``(n, 3, H, W)`` uint8 stylised, or
    nothing when ``control`` no longer wants it (asked before it runs)."""
    if _dropped(wanted_rows(control, 0, 1)):
        return []
    return [stylize_chunk(model, chunk.frames, chunk.styles, chunk.options, chunk.blend)]


def _dropped(rows: torch.Tensor | None) -> bool:
    return rows is not None and rows.numel() == 0


def style_transfer_details(model: StyleTransferModel) -> dict[str, Any]:
    """``describe()`` plus what a replica without the model needs to bound a request's
    cost: each preset's work in full-size passes."""
    return {
        **model.describe(),
        "full_size_passes": {name: model.full_size_passes(name) for name in get_args(PresetName)},
    }

"""Video style transfer: a clip stylised chunk by chunk, stable from frame to frame.

A clip is cut into chunks of ``CHUNK_FRAMES`` consecutive frames (the last may be
shorter). Each chunk is one batch through the preset's pyramid
(:meth:`StyleTransfer.stylize` with a :class:`~models.temporal.StageBlend`): after every
stage, each frame's image is blended with the previous frame's along the input's motion,
so the strokes move with the content instead of flickering (:mod:`models.temporal`).
The style's statistics are computed once and shared by every frame (the model's style
cache).

What one chunk hands to the next is a :class:`ClipState`: the frames done, the last
input frame and each stage's last (blended) image, all 8-bit. Stored after each chunk,
it lets a run stopped anywhere resume at the next chunk and make the same frames as a
run that never stopped: chunks always start at multiples of ``CHUNK_FRAMES``, so every
batch is the same in both runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import Tensor

from models.adain.options import StyleOptions
from models.devices import to_host
from models.flow import FlowEstimator
from models.temporal import BLEND_STRENGTH, FrameMotion, StageBlend, shrink

#: Frames per chunk: one batch through the model, one encoded segment, one checkpoint.
CHUNK_FRAMES = 8

#: How :func:`walk_clip` runs its CPU work off the event loop: ``await off_loop(f, *args)``.
OffLoop = Callable[..., Awaitable[Any]]


@dataclass
class ClipState:
    """How far a clip got: ``frames_done`` frames stylised; the last input frame as
    :func:`~models.temporal.shrink` gives it (``(3, h, w)`` uint8, ``None`` before the
    first); each blended stage's last image (:attr:`StageBlend.carried`, ``(3, h_k, w_k)``
    uint8 by stage index). A 720p clip's state is about 1.1 MB."""

    frames_done: int = 0
    last_input: Tensor | None = None
    carried: dict[int, Tensor] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """The state as a safetensors file (what a job's checkpoint keeps)."""
        tensors = {f"stage.{index}": image.contiguous() for index, image in self.carried.items()}
        if self.last_input is not None:
            tensors["last_input"] = self.last_input.contiguous()
        return save_tensors(tensors, metadata={"frames_done": str(self.frames_done)})

    def after(self, frames: Tensor, blend: StageBlend) -> ClipState:
        """The state once ``frames`` ``(n, 3, H, W)`` were stylised with ``blend``."""
        return ClipState(
            self.frames_done + frames.shape[0], shrink(frames[-1]), dict(blend.carried)
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> ClipState:
        tensors = load_tensors(data)
        metadata = _metadata(data)
        carried = {
            int(name.removeprefix("stage.")): image
            for name, image in tensors.items()
            if name.startswith("stage.")
        }
        return cls(int(metadata["frames_done"]), tensors.get("last_input"), carried)


def _metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file held in memory."""
    header_size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + header_size])
    return dict(header.get("__metadata__", {}))


def frame_motions(
    frames: Tensor, previous: Tensor | None, estimator: FlowEstimator
) -> list[FrameMotion | None]:
    """Each frame's motion from the one before it (``previous`` before the first, as
    :func:`~models.temporal.shrink` gives it; ``None`` where there is none: the clip's
    first frame).

    Shape:
        - frames: ``(n, 3, H, W)`` uint8; previous: ``(3, h, w)`` uint8 or ``None``.
    """
    motions: list[FrameMotion | None] = []
    for frame in frames:
        small = shrink(frame)
        motion = None if previous is None else FrameMotion.between(estimator, previous, small)
        motions.append(motion)
        previous = small
    return motions


def stylize_chunk(
    model: Any,
    frames: Tensor,
    styles: Sequence[Tensor],
    options: StyleOptions,
    blend: StageBlend,
) -> Tensor:
    """Stylise one chunk of consecutive frames as a batch, blended with the clip so far.

    Args:
        model: a :class:`~models.adain.StyleTransfer`.
        frames: the chunk's frames.
        styles: style images, each ``(1, 3, h, w)`` in ``[0, 1]``.
        options: how the frames are painted.
        blend: the clip's :class:`~models.temporal.StageBlend` (its carried images are
            the clip's so far), given the chunk's :func:`frame_motions`; it carries the
            chunk's last images on.

    On a GPU the chunk is one batch; on the CPU its frames go one at a time, which is
    faster there (a batch of eight 480p frames took ~1.2x the time per frame of one,
    the maps no longer fitting the caches), and gives the same frames: the blend carries
    the clip's state from one call to the next as within a batch.

    Shape:
        - frames: ``(n, 3, H, W)`` uint8; output: ``(n, 3, H, W)`` uint8 on the CPU.
    """
    motions = blend.motions
    step = 1 if str(model.device).startswith("cpu") else frames.shape[0]
    outputs = []
    for start in range(0, frames.shape[0], step):
        blend.begin(motions[start : start + step])
        batch = frames[start : start + step].float().div(255.0)
        output = model.stylize(batch, list(styles), blend=blend, **options.keywords())
        outputs.append(to_host(output.clamp(0.0, 1.0).mul(255.0).add(0.5).to(torch.uint8)))
    return torch.cat(outputs)


async def walk_clip(
    chunks: Iterator[Tensor],
    paint: Callable[[Tensor, StageBlend], Awaitable[Tensor]],
    state: ClipState | None = None,
    *,
    strength: float = BLEND_STRENGTH,
    off_loop: OffLoop = asyncio.to_thread,
) -> AsyncGenerator[tuple[Tensor, ClipState], None]:
    """The one walk over a clip's chunks (:func:`models.video.frame_chunks`), in order:
    each chunk is decoded and its motions estimated off the event loop (by ``off_loop``:
    a thread of asyncio's default pool, or the service's low-priority bulk threads), then
    ``paint(frames, blend)`` paints it with the clip's :class:`~models.temporal.StageBlend`
    of ``strength`` (:func:`stylize_chunk` here, or the chunk sent to a worker pool), and
    it is yielded as its stylised frames ``(n, 3, H, W)`` uint8 with the clip's state
    after it. ``state``: where a stopped run got to (its chunks then start there)."""
    state = state or ClipState()
    estimator = FlowEstimator()
    while (frames := await off_loop(next, chunks, None)) is not None:
        motions = await off_loop(frame_motions, frames, state.last_input, estimator)
        blend = StageBlend(strength, carried=state.carried)
        blend.begin(motions)
        stylised = await paint(frames, blend)
        state = state.after(frames, blend)
        yield stylised, state


def stylize_clip(
    model: Any,
    chunks: Iterator[Tensor],
    styles: Sequence[Tensor],
    options: StyleOptions,
    state: ClipState | None = None,
    *,
    strength: float = BLEND_STRENGTH,
) -> Iterator[tuple[Tensor, ClipState]]:
    """:func:`walk_clip` painting with ``model`` in this process (:func:`stylize_chunk`),
    driven one chunk at a time from synchronous code (the CLI, the benchmarks)."""

    async def paint(frames: Tensor, blend: StageBlend) -> Tensor:
        return stylize_chunk(model, frames, styles, options, blend)

    walk = walk_clip(chunks, paint, state, strength=strength)
    with asyncio.Runner() as runner:  # closing it closes the walk, finished or not
        while (chunk := runner.run(anext(walk, None))) is not None:
            yield chunk

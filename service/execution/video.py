"""A video stylisation as a job: decode, stylise and encode chunk by chunk, resumable.

The clip (the upload's bytes, kept as the job's input) is decoded ``CHUNK_FRAMES`` frames
at a time (:func:`models.video.frame_chunks`) and walked by the clip loop the CLI uses too
(:func:`models.adain.video.walk_clip`); here each chunk is one batcher item
(:class:`~service.workers.style_transfer.VideoChunk`, one batch on a GPU) and its output is
encoded as a segment of the clip's own codec (:func:`models.video.encode_segment`).
Memory holds one chunk of frames, the upload and the encoded segments (the result's
size), never the decoded clip.

A clip is bulk work (``service.priorities``), as a print is: its job is queued as
``BULK`` (it takes one of a worker's ``bulk_jobs_per_device`` slots until its last chunk
is painted), its chunks yield the device to every other forward, between the layers of
the networks too, and its CPU work outside them (decoding, motion, encoding the
segments, the state, the final remux) runs on the low-priority bulk threads. A small
job sent while a clip is painted waits for one layer of a chunk, not for the clip.

After each chunk the segment and then the clip's state
(:class:`~models.adain.video.ClipState`) are saved as the job's checkpoints (in the job
store, which every replica reads: SQLite's database, or Redis). A worker killed mid-clip
loses its lease; the next worker that claims the job reads the state, skips the frames
done (decoded and dropped, so its frames are the same) and goes on from the next chunk.
Chunks start at multiples of ``CHUNK_FRAMES`` and the state is 8-bit, so the final video
equals an uninterrupted run's frame for frame. A cancel stops at the next chunk.

At the end the segments are remuxed into the clip's container with its audio packets
copied unchanged and the parameters in the container's metadata
(:func:`models.video.assemble`).
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any, ClassVar

import torch

from models.adain.options import StyleOptions
from models.adain.video import CHUNK_FRAMES, ClipState, walk_clip
from models.images import from_png, to_float, to_png
from models.temporal import StageBlend
from models.video import VideoError, VideoInfo, assemble, encode_segment, frame_chunks
from service.errors import BadVideo
from service.execution.work import Checkpoint, RunContext, Work
from service.jobs.records import JobResult, pack
from service.model_types import StyleTransferModel
from service.priorities import off_loop_as_bulk
from service.workers.pool import WorkerPool
from service.workers.style_transfer import StylizeItem, VideoChunk

logger = logging.getLogger("atelier.jobs.video")

#: The checkpoint holding the clip's state; segments are ``segment.{k}``.
STATE = "state"


def segment_name(index: int) -> str:
    return f"segment.{index:06d}"


@dataclass(frozen=True, eq=False)
class StylizeVideoWork(Work):
    """A clip to stylise: the upload's bytes, what :func:`~models.video.probe` found, the
    size to paint its frames at, the styles (8-bit) and the options.

    Shape:
        - styles: each ``(3, h_i, w_i)`` uint8
    """

    kind: ClassVar[str] = "stylize_video"
    model: ClassVar[str] = "adain"
    long: ClassVar[bool] = True
    encodes_images: ClassVar[bool] = True

    video: bytes
    info: VideoInfo
    size: tuple[int, int]  # (H, W) of the stylised frames
    styles: tuple[torch.Tensor, ...]
    options: StyleOptions
    request_parameters: dict[str, Any]

    @property
    def bulk(self) -> bool:
        """A clip is bulk work (``service.priorities``), as a print is: many chunks, each a
        short forward that yields the device to every other one."""
        return True

    @property
    def unit(self) -> str:
        return "frame"

    @property
    def parameters(self) -> dict[str, Any]:
        return self.request_parameters

    def to_payload(self) -> bytes:
        info = asdict(self.info) | {"fps": [self.info.fps.numerator, self.info.fps.denominator]}
        header = {
            "kind": self.kind,
            "info": info,
            "size": list(self.size),
            "options": asdict(self.options),
            "parameters": self.request_parameters,
        }
        return pack(header, [self.video, *(to_png(style) for style in self.styles)])

    @classmethod
    def from_payload(cls, header: dict[str, Any], blobs: list[bytes]) -> StylizeVideoWork:
        fields = dict(header["info"])
        fields["fps"] = Fraction(*fields["fps"])
        return cls(
            blobs[0],
            VideoInfo(**fields),
            (header["size"][0], header["size"][1]),
            tuple(from_png(blob) for blob in blobs[1:]),
            StyleOptions(**header["options"]),
            header["parameters"],
        )

    async def run(
        self, pool: WorkerPool[StyleTransferModel, StylizeItem], context: RunContext
    ) -> JobResult:  # a clip shows no previews
        checkpoint = context.checkpoint
        start, segments = await _resume(checkpoint)
        context.report(start.frames_done, self.info.frames)
        styles = [to_float(style)[None] for style in self.styles]

        async def paint(frames: torch.Tensor, blend: StageBlend) -> torch.Tensor:
            chunk = VideoChunk(frames, styles, self.options, blend)
            return await context.submit(pool, chunk, None, bulk=True)

        chunks = frame_chunks(self.video, CHUNK_FRAMES, size=self.size, start=start.frames_done)
        saving = checkpoint is not None
        walk = walk_clip(_decoded(chunks), paint, start, off_loop=off_loop_as_bulk)
        async for stylised, state in walk:
            segment = await off_loop_as_bulk(encode_segment, stylised, self.info)
            segments.append(segment)
            if saving and checkpoint is not None:
                saving = await _save(checkpoint, len(segments) - 1, segment, state)
            context.report(state.frames_done, self.info.frames)
        context.done_with_device()
        parameters = {**self.request_parameters, **pool.provenance()}
        metadata = {"comment": json.dumps(parameters, sort_keys=True)}
        data = await off_loop_as_bulk(_assemble, segments, self.video, self.info, metadata)
        fields = {
            "parameters": parameters,
            "frames": self.info.frames,
            "resumed_from_frame": 0 if checkpoint is None else checkpoint.resumed_from,
        }
        return JobResult([data], self.info.media_type(), fields)


def _decoded(chunks: Iterator[torch.Tensor]) -> Iterator[torch.Tensor]:
    """``chunks``, where a stream that breaks mid-clip fails the job as the route refuses a
    corrupt upload (400 ``bad_video``), not as a 500."""
    try:
        yield from chunks
    except VideoError as exc:
        raise BadVideo(f"content: {exc}") from None


def _assemble(
    segments: list[bytes], video: bytes, info: VideoInfo, metadata: dict[str, str]
) -> bytes:
    out = io.BytesIO()
    assemble(segments, video, info, metadata, out)
    return out.getvalue()


async def _resume(checkpoint: Checkpoint | None) -> tuple[ClipState, list[bytes]]:
    """The clip's saved state and its segments, or a fresh start (no checkpoint, or one
    whose segments are not all there)."""
    if checkpoint is None:
        return ClipState(), []
    saved = await checkpoint.load(STATE)
    if saved is None:
        return ClipState(), []
    state = await off_loop_as_bulk(ClipState.from_bytes, saved)
    segments = []
    for index in range(-(-state.frames_done // CHUNK_FRAMES)):
        segment = await checkpoint.load(segment_name(index))
        if segment is None:
            logger.warning("a checkpointed segment is missing; the clip starts again")
            return ClipState(), []
        segments.append(segment)
    checkpoint.resumed_from = state.frames_done
    return state, segments


async def _save(checkpoint: Checkpoint, index: int, segment: bytes, state: ClipState) -> bool:
    """Save the chunk's segment, then the state that points past it; False (save no more
    in this run) when the store did not take one: a state never names a missing segment."""
    if not await checkpoint.save(segment_name(index), segment):
        return False
    data = await off_loop_as_bulk(state.to_bytes)
    return await checkpoint.save(STATE, data)

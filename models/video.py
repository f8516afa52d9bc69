"""Video IO for stylising a clip in chunks: probe, decode, encode segments, assemble.

A clip is stylised a chunk of frames at a time, with bounded memory and resumable output:

* :func:`probe` checks an upload (it has a video track, its first frame decodes) and
  describes it (:class:`VideoInfo`); :func:`looks_like_video` sniffs bytes without decoding;
* :func:`frame_chunks` decodes the frames in display order, ``chunk`` at a time, as
  ``(n, 3, H, W)`` uint8 RGB, optionally resized (:func:`fit_size`) and from frame ``start``;
* :func:`encode_segment` encodes one chunk of (stylised) frames as a self-contained
  *segment*, a small file of the output container whose first frame is a key frame;
* :func:`assemble` joins the segments into the final file: their video packets re-stamped
  with the source's frame times, the source's audio packets copied unchanged and
  interleaved by time, and metadata.

The container out is the container in: MP4 and MOV (H.264, audio copied, e.g. AAC), WebM
(VP9, Opus or Vorbis copied), Matroska (H.264, any audio copied), AVI (written as Matroska,
which holds any audio codec AVI does) and animated GIF (GIF, no audio).

Decisions:

* **H.264**: libx264, yuv420p, crf 23 (x264's own default), preset ``veryfast``. A
  stylised frame is all texture: eight 720p frames of The Starry Night took 70 kB a frame
  at crf 18 (100 MB a minute at 24 fps) and 33 kB at crf 23 (48 MB a minute), for 1 dB
  of PSNR, so crf 23 keeps a minute of 720p within the job results' budget many times
  over. A segment is encoded once and stored, on one encoder thread (bit-exact output)
  on CPUs shared with decoding and the model: ``veryfast`` runs about twice as fast as
  ``medium`` there (640x360, one thread: ~200 against ~90 frames/s) for a file and a
  PSNR within a few percent, so the encoder stays off the critical path. No B-frames (dts == pts, packets in display
  order) and a closed GOP, so segments concatenate by re-stamping their packets.
* **VP9**: libvpx-vp9, yuv420p, constant quality (crf 24, ``b=0``), ``lag-in-frames=0``
  and ``auto-alt-ref=0`` (no hidden alt-ref frames: one packet per shown frame, dts == pts),
  ``cpu-used=4``, one thread.
* **Odd sizes**: H.264 in yuv420p needs even sizes and a player cannot crop, so the
  output of MP4, MOV and Matroska is *floored to even*: :func:`fit_size` gives even sizes
  (the pipeline stylises at them), and :func:`encode_segment` crops an odd last row or
  column when given one. VP9 and GIF keep odd sizes.
* **Colour**: RGB is converted to BT.709 limited-range yuv420p and the stream is tagged so;
  decoding honours each stream's own tags (untagged: BT.601, as FFmpeg does).
* **Rotation**: a display matrix (phone clips) is applied on decode, like the ``ffmpeg``
  command line does: :class:`VideoInfo` gives the displayed size, frames come upright and
  the output carries no rotation.
* **GIF**: frames read with Pillow (transparency composited over white), counted and
  timed by FFmpeg's demuxer (a delay under 2 cs is read as 10 cs, what browsers show);
  written by FFmpeg's GIF encoder and muxer, each frame with a palette of its own
  (Pillow's adaptive median cut, Floyd-Steinberg dithering; ``global_palette=0``) and
  whole (``gifflags=0``), so frames are opaque. Pillow's GIF writer is not used: it folds
  identical consecutive frames into one (``benchmarks/gif_round_trip.py``: its 320-frame
  GIF with a still pause comes out of Pillow with 311 frames), which would change a
  clip's frame count. FFmpeg puts a GIF's header in its first packet, so the final GIF is
  made by decoding the segments and encoding their frames again with their own colours
  as palette (nothing quantised twice); it keeps the source's delays and loop count, and
  carries the comment in a comment extension, which FFmpeg's muxer does not write.
* **Timing**: each frame of the output is shown when the source showed its own (the
  source's frame timestamps, read from its packets), so a variable frame rate is kept
  frame for frame, and a GIF's delays.
* **Audio**: the source's first audio stream is copied packet for packet (payloads and
  side data unchanged; timestamps moved by the source's first frame's time, as the
  video's, so the sync holds), interleaved with the video by time. Other streams
  (subtitles, a second audio track) are dropped.
* **Metadata**: written as container metadata; Matroska and WebM keep any key (read back
  in upper case), MP4 and MOV the standard ones (``comment``, ``title``, ``description``,
  ...: others are dropped by the muxer), GIF one ``comment``.
* **Determinism**: one encoder thread, one scaler thread and the muxers' ``bitexact``
  flag (no random ids, no dates, no version strings): the same frames give the same
  segment bytes, and the same segments the same file.
"""

from __future__ import annotations

import functools
import io
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, BinaryIO, cast

import av
import numpy as np
import torch
from av.container import InputContainer, OutputContainer
from av.packet import Packet
from av.video.frame import VideoFrame
from av.video.stream import VideoStream
from PIL import Image, ImageSequence

from models.images import fit_longer_side, pil_to_uint8, sniff

__all__ = [
    "VideoError",
    "VideoInfo",
    "assemble",
    "encode_segment",
    "fit_size",
    "frame_chunks",
    "looks_like_video",
    "probe",
]


class VideoError(ValueError):
    """An upload that is not a usable video. ``reason``: "no_video" (no video track),
    "unsupported" (a codec/container the decoder cannot read), "corrupt" (a corrupt or
    truncated stream, or one that could not be read within the time budget)."""

    REASONS = ("no_video", "unsupported", "corrupt")

    def __init__(self, message: str, reason: str) -> None:
        if reason not in self.REASONS:
            raise ValueError(f"unknown VideoError reason {reason!r}")
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class _Format:
    """How one output container is written."""

    media_type: str
    suffix: str
    muxer: str  # FFmpeg's muxer name
    encoder: str  # FFmpeg's video encoder
    even_size: bool  # yuv420p H.264: both sides even


_H264 = "libx264"
_VP9 = "libvpx-vp9"
_GIF = "gif"
FORMATS: dict[str, _Format] = {
    "mp4": _Format("video/mp4", ".mp4", "mp4", _H264, True),
    "mov": _Format("video/quicktime", ".mov", "mov", _H264, True),
    "webm": _Format("video/webm", ".webm", "webm", _VP9, False),
    "matroska": _Format("video/x-matroska", ".mkv", "matroska", _H264, True),
    "gif": _Format("image/gif", ".gif", "gif", _GIF, False),
}

#: Encoder options: one thread and fixed settings, so the same frames give the same bytes.
ENCODER_OPTIONS: dict[str, dict[str, str]] = {
    _H264: {
        "crf": "23",
        "preset": "veryfast",
        "threads": "1",
        "x264-params": "bframes=0:open-gop=0:sliced-threads=0",
    },
    _VP9: {
        "crf": "24",
        "b": "0",
        "deadline": "good",
        "cpu-used": "4",
        "lag-in-frames": "0",
        "auto-alt-ref": "0",
        "row-mt": "0",
        "threads": "1",
    },
    _GIF: {"global_palette": "0", "gifflags": "0"},
}


@functools.cache
def _has_avx512() -> bool:
    """Whether this (Linux, x86) machine's CPUs report AVX-512 (``/proc/cpuinfo``)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return "avx512f" in line.split()
    except OSError:
        pass
    return False


def _encoder_options(encoder: str) -> dict[str, str]:
    """:data:`ENCODER_OPTIONS` for ``encoder``, with x264 kept to AVX2 on an AVX-512 CPU.

    x264's AVX-512 functions made its output vary from run to run on an AVX-512 (Zen 4)
    virtual machine: 2000 of 11000 encodings of the same five frames differed under load,
    none with ``asm=AVX2`` (every AVX-512 CPU has AVX2; on others x264 detects the CPU).
    """
    options = dict(ENCODER_OPTIONS[encoder])
    if encoder == _H264 and _has_avx512():
        options["x264-params"] += ":asm=AVX2"
    return options


_BT709 = 1  # AVCOL_PRI_BT709 == AVCOL_TRC_BT709 == AVCOL_SPC_BT709
_MPEG_RANGE = 1  # AVCOL_RANGE_MPEG: limited range
_FPS_DENOMINATOR = 1001  # frame rates are rationals like 30000/1001


@dataclass(frozen=True)
class VideoInfo:
    """What :func:`probe` found, and the container to write.

    ``container``: the output container ("mp4", "mov", "webm", "matroska", "gif");
    ``codec``: the source's video codec ("h264", "vp9", "gif", ...); ``width``, ``height``:
    the displayed size (after any rotation); ``fps``: the average frame rate (> 0);
    ``frames``: the number of frames; ``duration_s``: ``frames / fps``; ``audio_codec``:
    the first audio stream's codec, None without one (always for GIF).
    """

    container: str
    codec: str
    width: int
    height: int
    fps: Fraction
    frames: int
    duration_s: float
    audio_codec: str | None

    def media_type(self) -> str:
        """The output's media type, e.g. ``"video/mp4"``."""
        return FORMATS[self.container].media_type

    def suffix(self) -> str:
        """The output's file suffix, e.g. ``".mp4"``."""
        return FORMATS[self.container].suffix


# -- sniffing and probing ----------------------------------------------------------------


def looks_like_video(data: bytes) -> bool:
    """A video container by its signature (:func:`~models.images.sniff`), or a GIF with
    more than one frame (Pillow's ``n_frames``: the GIF is read)."""
    kind = sniff(data)
    if kind == "gif":
        try:
            with Image.open(io.BytesIO(data)) as image:
                return int(getattr(image, "n_frames", 1)) > 1
        except (OSError, ValueError, SyntaxError, EOFError):
            return False
    return kind == "video"


def probe(data: bytes, *, time_budget_s: float = 10.0) -> VideoInfo:
    """Describe an upload held in memory, or raise :class:`VideoError` (a one-line message).

    Checks that it has a video stream in a supported container and that its first frame
    decodes, and counts its frames by demuxing (packets, less the ones the container marks
    to discard). Checks the clock while reading: past ``time_budget_s`` it raises
    ``VideoError(reason="corrupt")``.
    """
    deadline = time.monotonic() + time_budget_s
    with _open_input(data, time_budget_s) as container:
        stream = _video_stream(container)
        output = _output_container(container.format.name, data)
        frames, rotation, shown = _count_frames(container, stream, deadline, time_budget_s)
        if output == "gif":
            _check_gif(data, frames)
        fps = _frame_rate(stream, frames, shown if output == "gif" else 0)
        audio = container.streams.audio
        width, height = stream.width, stream.height
        if rotation % 180 == 90:
            width, height = height, width
        return VideoInfo(
            container=output,
            codec=stream.codec_context.name,
            width=width,
            height=height,
            fps=fps,
            frames=frames,
            duration_s=float(frames / fps),
            audio_codec=audio[0].codec_context.name if audio else None,
        )


def fit_size(info: VideoInfo, max_side: int | None) -> tuple[int, int]:
    """``(H, W)`` to stylise at: the clip's own size when ``max_side`` is None or not smaller
    than its longer side, else scaled so its longer side is ``max_side``
    (:func:`~models.images.fit_longer_side`, as a photo is); both sides floored to even
    (and >= 2) when the output container needs even sizes (H.264)."""
    width, height = info.width, info.height
    if max_side is not None:
        if max_side < 2:
            raise ValueError(f"max_side must be at least 2, not {max_side}")
        width, height = fit_longer_side(width, height, max_side, min_side=0)
    if FORMATS[info.container].even_size:
        height, width = max(2, height - height % 2), max(2, width - width % 2)
    return height, width


def _open_input(data: bytes, timeout_s: float | None = None) -> InputContainer:
    """The upload opened from memory; VideoError when FFmpeg cannot open it, or (with
    ``timeout_s``) cannot open it, or read a packet, within ``timeout_s`` seconds."""
    timeout = None if timeout_s is None else (timeout_s, timeout_s)
    try:
        return av.open(io.BytesIO(data), "r", timeout=timeout)
    except av.error.ExitError:  # FFmpeg's reading interrupted by the timeout
        raise VideoError(f"the video could not be read within {timeout_s:g} s", "corrupt") from None
    except av.FFmpegError as error:
        if looks_like_video(data):
            raise VideoError(f"corrupt or truncated video: {_reason(error)}", "corrupt") from None
        raise VideoError(f"not a readable video file: {_reason(error)}", "unsupported") from None


def _reason(error: Exception) -> str:
    """FFmpeg's message for ``error``, on one line."""
    message = getattr(error, "strerror", None) or str(error)
    return " ".join(str(message).split())


def _video_stream(container: InputContainer) -> VideoStream:
    """The first video stream that is not a still picture (an audio file's cover art)."""
    for stream in container.streams.video:
        if not stream.disposition & av.stream.Disposition.attached_pic:
            return stream
    raise VideoError("the file has no video track", "no_video")


def _output_container(demuxer: str, data: bytes) -> str:
    """The container to write for a source read by FFmpeg's ``demuxer``."""
    names = set(demuxer.split(","))
    if "mp4" in names or "mov" in names:
        is_mp4 = data[4:8] == b"ftyp" and data[8:12] != b"qt  "
        return "mp4" if is_mp4 else "mov"
    if "matroska" in names:
        return "webm" if _ebml_doctype(data) == b"webm" else "matroska"
    if "avi" in names:
        return "matroska"
    if "gif" in names:
        return "gif"
    raise VideoError(f"the {demuxer} container is not supported", "unsupported")


def _ebml_doctype(data: bytes) -> bytes:
    """The DocType of an EBML header (``b"webm"``, ``b"matroska"``), ``b""`` if not found."""
    at = data.find(b"\x42\x82", 4, 64)
    if at < 0 or at + 3 > len(data):
        return b""
    size_byte = data[at + 2]
    if not size_byte & 0x80:  # only one-byte sizes: DocTypes are short
        return b""
    size = size_byte & 0x7F
    return data[at + 3 : at + 3 + size]


def _count_frames(
    container: InputContainer, stream: VideoStream, deadline: float, budget: float
) -> tuple[int, int, int]:
    """``(frames, rotation, shown)``: the stream's packets counted by demuxing (less those
    the container marks to discard), the display rotation of its first frame, decoded on
    the way (VideoError if it does not decode, or the stream is cut short), and the sum of
    the packets' durations (in the stream's time base)."""
    packets, frames, shown, first = 0, 0, 0, None
    try:
        for packet in container.demux(stream):
            if time.monotonic() > deadline:
                raise VideoError(f"the video could not be read within {budget:g} s", "corrupt")
            if packet.size == 0:
                continue
            packets += 1
            frames += 0 if packet.is_discard else 1
            shown += packet.duration or 0
            if first is None:
                first = next(iter(_decode(stream, packet)), None)
        if first is None:
            first = next(iter(_decode(stream, None)), None)
    except av.error.ExitError:
        raise VideoError(f"the video could not be read within {budget:g} s", "corrupt") from None
    except av.FFmpegError as error:
        raise VideoError(f"corrupt video stream: {_reason(error)}", "corrupt") from None
    if first is None:
        raise VideoError("no frame of the video could be decoded", "corrupt")
    if packets < stream.frames:  # the container's own count (MP4, MOV), 0 if none
        raise VideoError(f"truncated video: {packets} of {stream.frames} frames", "corrupt")
    return frames, _rotation(first), shown


def _decode(stream: VideoStream, packet: Packet[Any] | None) -> list[VideoFrame]:
    """``stream.decode(packet)``, with a missing decoder as an unsupported codec."""
    if stream.codec_context is None:
        raise VideoError("no decoder for this video codec", "unsupported")
    try:
        return stream.decode(packet)
    except (av.error.DecoderNotFoundError, av.error.PatchWelcomeError) as error:
        raise VideoError(f"unsupported video codec: {_reason(error)}", "unsupported") from None


def _frame_rate(stream: VideoStream, frames: int, shown: int) -> Fraction:
    """The stream's average frame rate: ``frames`` over ``shown`` (the packets' summed
    durations) when given, as for a GIF (its delays: FFmpeg reads one under 2 cs as 10 cs,
    what browsers show), else the container's (from its timestamps when it has none), as a
    rational with a small denominator (30000/1001, not 1000000000/33366666)."""
    if shown > 0 and stream.time_base is not None:
        return Fraction(frames) / (shown * stream.time_base)
    for rate in (stream.average_rate, stream.guessed_rate):
        if rate is not None and rate > 0:
            return Fraction(rate).limit_denominator(_FPS_DENOMINATOR)
    if stream.duration and stream.time_base and frames:
        return (frames / (stream.duration * stream.time_base)).limit_denominator(_FPS_DENOMINATOR)
    raise VideoError("the video has no frame rate", "corrupt")


def _rotation(frame: VideoFrame) -> int:
    """The frame's display rotation, counter-clockwise degrees: 0, 90, 180 or 270."""
    degrees = round(frame.rotation)
    if degrees % 90:
        return 0  # a rotation that is not a quarter turn: shown as stored
    return (degrees // 90) % 4 * 90


# -- decoding -----------------------------------------------------------------------------


def frame_chunks(
    data: bytes, chunk: int, *, size: tuple[int, int] | None = None, start: int = 0
) -> Iterator[torch.Tensor]:
    """The clip's frames in display order, ``chunk`` at a time (the last may be shorter),
    as ``(n, 3, H, W)`` uint8 RGB.

    ``size=(H, W)`` resizes each frame (area averaging, antialiased); without it every
    frame has the first frame's displayed size. ``start`` skips the first ``start`` frames
    (decoded and dropped, so the frames are exactly those of a run from 0). Decoding is
    deterministic and holds one chunk at a time; VideoError on a corrupt stream.
    """
    if chunk < 1 or start < 0:
        raise ValueError(f"chunk must be >= 1 and start >= 0, not {chunk} and {start}")
    frames = _gif_frames(data, size) if _is_gif(data) else _av_frames(data, size)
    return _batches(itertools.islice(frames, start, None), chunk)


def _batches(frames: Iterator[Callable[[], np.ndarray]], chunk: int) -> Iterator[torch.Tensor]:
    """``(n, 3, H, W)`` tensors of ``chunk`` frames; each frame a thunk giving ``(H, W, 3)``,
    so the frames skipped before a start are never converted."""
    while batch := [make() for make in itertools.islice(frames, chunk)]:
        yield torch.from_numpy(np.stack(batch)).permute(0, 3, 1, 2).contiguous()


def _av_frames(data: bytes, size: tuple[int, int] | None) -> Iterator[Callable[[], np.ndarray]]:
    """Each decoded frame as a thunk giving its upright ``(H, W, 3)`` uint8 RGB pixels."""
    with _open_input(data) as container:
        stream = _video_stream(container)
        stream.thread_type = "AUTO"  # frame threads: the same frames, faster
        target = size
        try:
            for packet in container.demux(stream):
                for frame in _decode(stream, packet if packet.size else None):
                    if target is None:
                        target = _displayed_size(frame)
                    yield _rgb_thunk(frame, target)
        except av.FFmpegError as error:
            raise VideoError(f"corrupt video stream: {_reason(error)}", "corrupt") from None


def _displayed_size(frame: VideoFrame) -> tuple[int, int]:
    """``(H, W)`` of the frame once rotated for display."""
    if _rotation(frame) % 180 == 90:
        return frame.width, frame.height
    return frame.height, frame.width


def _rgb_thunk(frame: VideoFrame, size: tuple[int, int]) -> Callable[[], np.ndarray]:
    """A function giving the frame's ``(H, W, 3)`` RGB pixels at displayed size ``size``."""

    def rgb() -> np.ndarray:
        quarter_turns = _rotation(frame) // 90
        height, width = size if quarter_turns % 2 == 0 else size[::-1]
        converted = frame.reformat(
            width=width, height=height, format="rgb24", interpolation="AREA", threads=1
        )
        pixels = converted.to_ndarray()
        return np.ascontiguousarray(np.rot90(pixels, quarter_turns)) if quarter_turns else pixels

    return rgb


def _gif_frames(data: bytes, size: tuple[int, int] | None) -> Iterator[Callable[[], np.ndarray]]:
    """Each frame of a GIF (Pillow; transparency over white) as a thunk giving ``(H, W, 3)``."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            for frame in ImageSequence.Iterator(image):
                rgba = frame.convert("RGBA")  # composes this frame now: the GIF moves on
                yield _pil_thunk(rgba, size)
    except (OSError, ValueError, SyntaxError) as error:
        raise VideoError(f"corrupt GIF: {_reason(error)}", "corrupt") from None


def _pil_thunk(image: Image.Image, size: tuple[int, int] | None) -> Callable[[], np.ndarray]:
    """A function giving ``image`` resized to ``size`` as ``(H, W, 3)`` uint8 RGB."""

    def rgb() -> np.ndarray:
        resized = image
        if size is not None and size != (image.height, image.width):
            resized = image.resize((size[1], size[0]), Image.Resampling.BILINEAR)
        return pil_to_uint8(resized).permute(1, 2, 0).numpy()

    return rgb


# -- encoding -----------------------------------------------------------------------------


def encode_segment(frames: torch.Tensor, info: VideoInfo) -> bytes:
    """``frames`` ``(n, 3, H, W)`` uint8 RGB -> a self-contained segment: a small file of
    ``info.container`` whose first frame is a key frame, timestamps ``0..n-1`` at
    ``info.fps``. An odd H or W is cropped to even for H.264. Deterministic: the same
    frames give the same bytes."""
    if frames.dtype != torch.uint8 or frames.ndim != 4 or frames.shape[1] != 3:
        shape = tuple(frames.shape)
        raise ValueError(f"frames must be (n, 3, H, W) uint8, not {shape} {frames.dtype}")
    if frames.shape[0] == 0:
        raise ValueError("a segment needs at least one frame")
    pixels = frames.permute(0, 2, 3, 1).cpu().numpy()  # (n, H, W, 3)
    fmt = FORMATS[info.container]
    if fmt.even_size:
        height, width = pixels.shape[1] // 2 * 2, pixels.shape[2] // 2 * 2
        if height == 0 or width == 0:
            raise ValueError(f"{info.container} needs frames of at least 2x2 pixels")
        pixels = pixels[:, :height, :width]
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=fmt.muxer) as output:
        _set_bitexact(output)
        stream = _video_out(output, fmt.encoder, info.fps, (pixels.shape[1], pixels.shape[2]))
        for index, rgb in enumerate(pixels):
            frame = _encoder_frame(np.ascontiguousarray(rgb), fmt.encoder)
            frame.pts = index
            output.mux(stream.encode(frame))
        output.mux(stream.encode(None))
    return buffer.getvalue()


def _video_out(
    output: OutputContainer, encoder: str, rate: Fraction, size: tuple[int, int]
) -> VideoStream:
    """A video stream of ``size`` ``(H, W)`` added to ``output``, time base ``1 / rate``:
    ``encoder`` on one thread with :data:`ENCODER_OPTIONS`, fed BT.709 yuv420p frames (a
    GIF: ``pal8``)."""
    options = _encoder_options(encoder)
    stream = cast(VideoStream, output.add_stream(encoder, rate=rate, options=options))
    stream.height, stream.width = size
    stream.time_base = 1 / rate
    context = stream.codec_context
    context.thread_count = 1
    if encoder == _GIF:
        stream.pix_fmt = "pal8"
        return stream
    stream.pix_fmt = "yuv420p"
    context.color_primaries = context.color_trc = context.colorspace = _BT709
    context.color_range = _MPEG_RANGE
    return stream


def _encoder_frame(rgb: np.ndarray, encoder: str) -> VideoFrame:
    """``(H, W, 3)`` uint8 RGB as ``encoder`` takes it: BT.709 limited-range yuv420p, or
    for a GIF 256 colours of its own (Pillow's median cut, Floyd-Steinberg dithering)."""
    if encoder == _GIF:
        quantised = Image.fromarray(rgb, "RGB").quantize(
            256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.FLOYDSTEINBERG
        )
        colours = np.asarray(quantised.getpalette("RGB") or (), np.uint8).reshape(-1, 3)
        return _palette_frame(np.asarray(quantised), colours)
    frame = VideoFrame.from_ndarray(rgb, format="rgb24")
    return frame.reformat(
        format="yuv420p", dst_colorspace="ITU709", dst_color_range="MPEG", threads=1
    )


def _palette_frame(indices: np.ndarray, colours: np.ndarray) -> VideoFrame:
    """A ``pal8`` frame: ``(H, W)`` uint8 indices into ``colours`` ``(k, 3)`` RGB, k <= 256
    (opaque: FFmpeg's palette is 256 ARGB entries)."""
    palette = np.zeros((256, 4), np.uint8)
    palette[:, 0] = 255
    palette[: len(colours), 1:] = colours[:256]
    pair: Any = (np.ascontiguousarray(indices), palette)  # PyAV's pal8 takes a pair
    return VideoFrame.from_ndarray(pair, format="pal8")


def _set_bitexact(container: OutputContainer) -> None:
    """No random ids, dates or version strings in what ``container`` writes."""
    container.flags |= cast(int, av.container.Flags.bitexact.value)


# -- assembling ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Clock:
    """When the source shows its frames: frame ``k`` at ``stamps[k]`` (increasing, in
    ``time_base`` units, the first at 0), the last one for ``last`` units; ``start``: the
    source's time of its first frame, in seconds (its audio moves by as much)."""

    time_base: Fraction
    stamps: list[int]
    last: int
    start: Fraction

    def stamp(self, index: int) -> tuple[int, int]:
        """``(pts, duration)`` of frame ``index``; past the source's frames, ``last`` apart."""
        count = len(self.stamps)
        pts = (
            self.stamps[index]
            if index < count
            else self.stamps[-1] + (index - count + 1) * self.last
        )
        after = self.stamps[index + 1] if index + 1 < count else pts + self.last
        return pts, after - pts


def _source_clock(source: bytes, fps: Fraction) -> _Clock:
    """The source's frame times, read from its video packets (less those the container
    marks to discard) in display order: a variable frame rate is kept frame for frame.
    Without timestamps the frames are ``1 / fps`` apart."""
    with _open_input(source) as container:
        stream = _video_stream(container)
        times = [
            (packet.pts, packet.duration or 0)
            for packet in _payloads(container.demux(stream))
            if not packet.is_discard
        ]
        time_base = stream.time_base
    stamps = [pts for pts, _ in sorted(times, key=lambda time: time[0] or 0)]
    if not stamps or time_base is None or None in stamps:
        return _Clock(1 / fps, list(range(len(stamps) or 1)), 1, Fraction(0))
    increasing = list(itertools.accumulate(stamps, lambda previous, pts: max(pts, previous + 1)))
    first = increasing[0]
    last = max(times, key=lambda time: time[0] or 0)[1] or max(1, round(1 / (fps * time_base)))
    return _Clock(time_base, [pts - first for pts in increasing], last, first * time_base)


def assemble(
    segments: Iterable[bytes],
    source: bytes,
    info: VideoInfo,
    metadata: dict[str, str],
    out: BinaryIO,
) -> None:
    """Write the final video to ``out`` (seekable for MP4 and MOV).

    The segments' frames in order, each shown when the source showed its own (frame ``k``
    at the source's ``k``-th timestamp, so a variable frame rate, or a GIF's delays, are
    kept), the source's first audio stream's packets copied unchanged and interleaved by
    time, and ``metadata`` as container metadata (a GIF: its comment). The segments' video
    packets are copied; a GIF's frames are decoded and encoded again with their own
    colours (FFmpeg's GIF demuxer puts a file header in a segment's first packet, so its
    packets cannot be copied into another GIF). Segments are read lazily, one at a time.
    """
    pieces = iter(segments)
    first = next(pieces, None)
    if first is None:
        raise ValueError("no segments to assemble")
    clock = _source_clock(source, info.fps)
    if info.container == "gif":
        gif = _gif(itertools.chain([first], pieces), clock, _gif_loop(source))
        out.write(_with_comment(gif, metadata.get("comment")))
        return
    with (
        av.open(out, "w", format=FORMATS[info.container].muxer) as output,
        av.open(io.BytesIO(source), "r") as original,
    ):
        _set_bitexact(output)
        output.metadata.update(metadata)
        with av.open(io.BytesIO(first), "r") as opened:
            template = opened.streams.video[0]
            video = output.add_stream_from_template(template)
            parameters = _parameters(template)
        video.codec_context.framerate = info.fps
        video.time_base = clock.time_base
        audio_in = original.streams.audio[0] if original.streams.audio else None
        audio = None if audio_in is None else output.add_stream_from_template(audio_in)
        if audio is not None and audio_in is not None and audio_in.language:
            audio.metadata["language"] = audio_in.language
        pending = _audio_packets(original, audio_in, audio, clock.start)
        frames = 0
        for index, data in enumerate(itertools.chain([first], pieces)):
            with av.open(io.BytesIO(data), "r") as segment:
                stream = segment.streams.video[0]
                if _parameters(stream) != parameters:
                    raise ValueError(f"segment {index} was not encoded like the first one")
                for packet in _payloads(segment.demux(stream)):
                    _restamp(packet, video, clock, frames)
                    pending.mux_until(output, clock.stamp(frames)[0] * clock.time_base)
                    output.mux(packet)
                    frames += 1
        pending.mux_until(output, None)


def _payloads(packets: Iterable[Packet[Any]]) -> Iterator[Packet[Any]]:
    """The packets that carry data (not the empty ones that end a demux)."""
    return (packet for packet in packets if packet.size)


def _parameters(stream: VideoStream) -> tuple[str, int, int, bytes | None]:
    """What segments joined into one stream must share: codec, size, codec headers."""
    context = stream.codec_context
    return context.name, stream.width, stream.height, context.extradata


def _restamp(packet: Packet[Any], stream: Any, clock: _Clock, frame: int) -> None:
    """Make ``packet`` frame number ``frame`` of the output ``stream`` (dts == pts)."""
    packet.stream = stream
    packet.time_base = clock.time_base
    packet.pts, packet.duration = clock.stamp(frame)
    packet.dts = packet.pts


class _AudioQueue:
    """The source's audio packets, muxed lazily up to a time (seconds of the output)."""

    def __init__(self, packets: Iterator[Packet[Any]], shift: Fraction) -> None:
        self._packets = packets
        self._shift = shift  # the source's first frame's time, which becomes 0
        self._next: Packet[Any] | None = next(packets, None)

    def mux_until(self, output: OutputContainer, limit: Fraction | None) -> None:
        """Mux the packets up to ``limit`` seconds (all of them when None)."""
        while self._next is not None and not self._after(self._next, limit):
            self._shift_packet(self._next)
            output.mux(self._next)
            self._next = next(self._packets, None)

    def _after(self, packet: Packet[Any], limit: Fraction | None) -> bool:
        """Whether ``packet`` plays after ``limit`` seconds of the output."""
        stamp = packet.dts if packet.dts is not None else packet.pts
        if limit is None or stamp is None:
            return False
        return bool(stamp * packet.time_base - self._shift > limit)

    def _shift_packet(self, packet: Packet[Any]) -> None:
        if not self._shift:
            return
        offset = round(self._shift / packet.time_base)
        if packet.pts is not None:
            packet.pts -= offset
        if packet.dts is not None:
            packet.dts -= offset


def _audio_packets(
    original: InputContainer, audio_in: Any, audio_out: Any, shift: Fraction
) -> _AudioQueue:
    """The source's audio packets, bound for ``audio_out`` and moved ``shift`` seconds
    earlier, as an :class:`_AudioQueue`."""
    if audio_in is None:
        return _AudioQueue(iter(()), shift)

    def packets() -> Iterator[Packet[Any]]:
        for packet in _payloads(original.demux(audio_in)):
            packet.stream = audio_out
            yield packet

    return _AudioQueue(packets(), shift)


# -- GIF ----------------------------------------------------------------------------------

_GIF_HEADERS = (b"GIF87a", b"GIF89a")


def _is_gif(data: bytes) -> bool:
    return data[:6] in _GIF_HEADERS


def _check_gif(data: bytes, frames: int) -> None:
    """VideoError unless the GIF has two frames or more and its last one decodes (Pillow):
    FFmpeg's demuxer reads a GIF cut short as a shorter one."""
    if frames < 2:
        raise VideoError("a GIF of one frame is a still image, not a video", "no_video")
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.seek(frames - 1)
            image.load()
    except (OSError, ValueError, SyntaxError, EOFError) as error:
        raise VideoError(f"corrupt GIF: {_reason(error)}", "corrupt") from None


def _gif_loop(source: bytes) -> int | None:
    """The source GIF's loop count (0: forever), None when it plays once (Pillow reads the
    header only)."""
    with Image.open(io.BytesIO(source)) as image:
        loop = image.info.get("loop")
    return None if loop is None else int(loop)


def _gif(segments: Iterable[bytes], clock: _Clock, loop: int | None) -> bytes:
    """The segments' frames as one GIF (FFmpeg's encoder and muxer), shown at ``clock``'s
    times (GIF delays are centiseconds: ``clock`` is a GIF's own), looping ``loop`` times."""
    buffer = io.BytesIO()
    options = {"loop": str(-1 if loop is None else loop), "final_delay": str(clock.last)}
    with av.open(buffer, "w", format="gif", options=options) as output:
        _set_bitexact(output)
        stream: VideoStream | None = None
        index = 0
        for number, data in enumerate(segments):
            with av.open(io.BytesIO(data), "r") as segment:
                source = segment.streams.video[0]
                size = (source.height, source.width)
                if stream is None:
                    stream = _video_out(output, _GIF, 1 / clock.time_base, size)
                elif size != (stream.height, stream.width):
                    raise ValueError(f"segment {number} was not encoded like the first one")
                for decoded in segment.decode(source):
                    frame = _exact_palette(decoded.to_ndarray(format="rgb24"))
                    frame.pts = clock.stamp(index)[0]
                    output.mux(stream.encode(frame))
                    index += 1
        if stream is not None:
            output.mux(stream.encode(None))
    return buffer.getvalue()


def _exact_palette(rgb: np.ndarray) -> VideoFrame:
    """A decoded GIF frame ``(H, W, 3)`` (at most 256 colours) as ``pal8`` with its own
    colours as the palette: nothing is quantised again."""
    packed = rgb.astype(np.uint32) @ np.array([1 << 16, 1 << 8, 1], np.uint32)
    values, indices = np.unique(packed, return_inverse=True)
    if len(values) > 256:
        raise ValueError(f"a GIF frame of {len(values)} colours: at most 256")
    colours = np.stack([values >> 16, values >> 8 & 0xFF, values & 0xFF], axis=-1)
    return _palette_frame(indices.reshape(rgb.shape[:2]).astype(np.uint8), colours.astype(np.uint8))


def _with_comment(gif: bytes, comment: str | None) -> bytes:
    """``gif`` with ``comment`` in a comment extension (GIF89a, section 24: ``21 FE``, sub-
    blocks of at most 255 bytes, ``00``) before its first frame, since FFmpeg's GIF muxer
    writes none. Its logical screen descriptor ends at byte 13: no global colour table,
    every frame has its own."""
    if not comment:
        return gif
    if gif[10] & 0x80:
        raise ValueError("a GIF with a global colour table")
    text = comment.encode()
    blocks = b"".join(
        bytes([len(text[at : at + 255])]) + text[at : at + 255] for at in range(0, len(text), 255)
    )
    return gif[:13] + b"\x21\xfe" + blocks + b"\x00" + gif[13:]

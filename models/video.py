"""Video IO for stylising a clip in chunks: probe, decode, encode segments, assemble.

A clip is stylised a chunk of frames at a time, with bounded memory and resumable output:

* :func:`probe` checks an upload (it has a video track, its first frame decodes) and
  describes it (:class:`VideoInfo`); :func:`looks_like_video` sniffs bytes without decoding;
* :func:`frame_chunks` decodes the frames in display order, ``chunk`` at a time, as
  ``(n, 3, H, W)`` uint8 RGB, optionally resized (:func:`fit_size`) and from frame ``start``;
* :func:`encode_segment` encodes one chunk of (stylised) frames as a self-contained
  *segment*, a small file of the output container whose first frame is a key frame;
* :func:`assemble` joins the segments into the final file: their video packets re-stamped
  end to end, the source's audio packets copied unchanged and interleaved by time, and
  metadata.

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
* **GIF**: read with Pillow (transparency composited over white); each frame of a segment
  is quantised with Pillow's adaptive (median cut, Floyd-Steinberg) palette and written
  by Pillow as a one-frame GIF; segments and the final file are made by moving those
  frames' compressed blocks (image descriptor, local colour table, LZW data) between
  GIF files unchanged, with new graphic control blocks: no pixel is re-encoded. The final
  GIF keeps the source's frame delays and loop count; frames are opaque.
* **Audio**: the source's first audio stream is copied packet for packet (payloads and
  side data unchanged; timestamps moved by the source's video start time, so the sync
  holds), interleaved with the video by time. Other streams (subtitles, a second audio
  track) are dropped. The video is written at a constant ``info.fps``.
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
    muxer: str  # FFmpeg's muxer name ("" for GIF, written here)
    encoder: str  # FFmpeg's video encoder ("" for GIF, Pillow)
    even_size: bool  # yuv420p H.264: both sides even


_H264 = "libx264"
_VP9 = "libvpx-vp9"
FORMATS: dict[str, _Format] = {
    "mp4": _Format("video/mp4", ".mp4", "mp4", _H264, True),
    "mov": _Format("video/quicktime", ".mov", "mov", _H264, True),
    "webm": _Format("video/webm", ".webm", "webm", _VP9, False),
    "matroska": _Format("video/x-matroska", ".mkv", "matroska", _H264, True),
    "gif": _Format("image/gif", ".gif", "", "", False),
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
    if _is_gif(data):
        return _probe_gif(data, deadline)
    with _open_input(data, time_budget_s) as container:
        stream = _video_stream(container)
        output = _output_container(container.format.name, data)
        frames, rotation = _count_frames(container, stream, deadline, time_budget_s)
        fps = _frame_rate(stream, frames)
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
) -> tuple[int, int]:
    """``(frames, rotation)``: the stream's packets counted by demuxing (less those the
    container marks to discard), and the display rotation of its first frame, decoded on
    the way (VideoError if it does not decode, or the stream is cut short)."""
    packets, frames, first = 0, 0, None
    try:
        for packet in container.demux(stream):
            if time.monotonic() > deadline:
                raise VideoError(f"the video could not be read within {budget:g} s", "corrupt")
            if packet.size == 0:
                continue
            packets += 1
            frames += 0 if packet.is_discard else 1
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
    return frames, _rotation(first)


def _decode(stream: VideoStream, packet: Packet[Any] | None) -> list[VideoFrame]:
    """``stream.decode(packet)``, with a missing decoder as an unsupported codec."""
    if stream.codec_context is None:
        raise VideoError("no decoder for this video codec", "unsupported")
    try:
        return stream.decode(packet)
    except (av.error.DecoderNotFoundError, av.error.PatchWelcomeError) as error:
        raise VideoError(f"unsupported video codec: {_reason(error)}", "unsupported") from None


def _frame_rate(stream: VideoStream, frames: int) -> Fraction:
    """The stream's average frame rate (from its timestamps when the container has none),
    as a rational with a small denominator (30000/1001, not 1000000000/33366666)."""
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
    if not fmt.encoder:
        return _gif_segment(pixels, info.fps)
    if fmt.even_size:
        height, width = pixels.shape[1] // 2 * 2, pixels.shape[2] // 2 * 2
        if height == 0 or width == 0:
            raise ValueError(f"{info.container} needs frames of at least 2x2 pixels")
        pixels = pixels[:, :height, :width]
    return _av_segment(pixels, fmt, info.fps)


def _av_segment(pixels: np.ndarray, fmt: _Format, fps: Fraction) -> bytes:
    """``(n, H, W, 3)`` uint8 RGB encoded with ``fmt``'s encoder into a file of its muxer."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=fmt.muxer) as output:
        _set_bitexact(output)
        options = _encoder_options(fmt.encoder)
        stream = cast(VideoStream, output.add_stream(fmt.encoder, rate=fps, options=options))
        stream.width, stream.height = pixels.shape[2], pixels.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.time_base = 1 / fps
        context = stream.codec_context
        context.thread_count = 1
        context.color_primaries = context.color_trc = context.colorspace = _BT709
        context.color_range = _MPEG_RANGE
        for index, rgb in enumerate(pixels):
            frame = VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
            yuv = frame.reformat(
                format="yuv420p", dst_colorspace="ITU709", dst_color_range="MPEG", threads=1
            )
            yuv.pts = index
            output.mux(stream.encode(yuv))
        output.mux(stream.encode(None))
    return buffer.getvalue()


def _set_bitexact(container: OutputContainer) -> None:
    """No random ids, dates or version strings in what ``container`` writes."""
    container.flags |= cast(int, av.container.Flags.bitexact.value)


# -- assembling ---------------------------------------------------------------------------


def assemble(
    segments: Iterable[bytes],
    source: bytes,
    info: VideoInfo,
    metadata: dict[str, str],
    out: BinaryIO,
) -> None:
    """Write the final video to ``out`` (seekable for MP4 and MOV).

    The segments' video packets in order, re-stamped end to end at ``info.fps`` (the
    output stream made from the first segment's stream), the source's first audio
    stream's packets copied unchanged and interleaved by time, and ``metadata`` as
    container metadata. Segments are read lazily, one at a time.
    """
    if info.container == "gif":
        _assemble_gif(segments, source, info.fps, metadata.get("comment"), out)
        return
    pieces = iter(segments)
    first = next(pieces, None)
    if first is None:
        raise ValueError("no segments to assemble")
    fmt = FORMATS[info.container]
    with (
        av.open(out, "w", format=fmt.muxer) as output,
        av.open(io.BytesIO(source), "r") as original,
    ):
        _set_bitexact(output)
        output.metadata.update(metadata)
        with av.open(io.BytesIO(first), "r") as opened:
            template = opened.streams.video[0]
            video = output.add_stream_from_template(template)
            parameters = _parameters(template)
        video.codec_context.framerate = info.fps
        video.time_base = 1 / info.fps
        audio_in = original.streams.audio[0] if original.streams.audio else None
        audio = None if audio_in is None else output.add_stream_from_template(audio_in)
        if audio is not None and audio_in is not None and audio_in.language:
            audio.metadata["language"] = audio_in.language
        pending = _audio_packets(original, audio_in, audio)
        frames = 0
        for index, data in enumerate(itertools.chain([first], pieces)):
            with av.open(io.BytesIO(data), "r") as segment:
                stream = segment.streams.video[0]
                if _parameters(stream) != parameters:
                    raise ValueError(f"segment {index} was not encoded like the first one")
                for packet in _payloads(segment.demux(stream)):
                    _restamp(packet, video, frames, info.fps)
                    pending.mux_until(output, Fraction(frames) / info.fps)
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


def _restamp(packet: Packet[Any], stream: Any, frame: int, fps: Fraction) -> None:
    """Make ``packet`` frame number ``frame`` of the output ``stream`` (dts == pts)."""
    packet.stream = stream
    packet.time_base = 1 / fps
    packet.pts = packet.dts = frame
    packet.duration = 1


class _AudioQueue:
    """The source's audio packets, muxed lazily up to a time (seconds of the output)."""

    def __init__(self, packets: Iterator[Packet[Any]], shift: Fraction) -> None:
        self._packets = packets
        self._shift = shift  # the source's video start time, which becomes 0
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


def _audio_packets(original: InputContainer, audio_in: Any, audio_out: Any) -> _AudioQueue:
    """The source's audio packets, bound for ``audio_out``, as an :class:`_AudioQueue`."""
    video = _video_stream(original)
    shift = Fraction(0)
    if video.start_time is not None and video.time_base is not None:
        shift = video.start_time * video.time_base
    if audio_in is None:
        return _AudioQueue(iter(()), shift)

    def packets() -> Iterator[Packet[Any]]:
        for packet in _payloads(original.demux(audio_in)):
            packet.stream = audio_out
            yield packet

    return _AudioQueue(packets(), shift)


# -- GIF ----------------------------------------------------------------------------------

_GIF_HEADERS = (b"GIF87a", b"GIF89a")
_GIF_TRAILER = b"\x3b"
_NETSCAPE = b"NETSCAPE2.0"
_DEFAULT_DELAY_CS = 10  # what browsers show for a delay of 0 or 1 centisecond


def _is_gif(data: bytes) -> bool:
    return data[:6] in _GIF_HEADERS


@dataclass(frozen=True)
class _GifFrame:
    """One frame's blocks: its delay and its image, ready to be written elsewhere.

    ``image``: the image descriptor (with its own, local colour table) and the LZW data,
    byte for byte as they were, less the global colour table they may have used.
    """

    delay_cs: int
    image: bytes


@dataclass(frozen=True)
class _GifHeader:
    width: int
    height: int
    loop: int | None  # the NETSCAPE loop count; None: play once


def _u16(data: bytes, at: int) -> int:
    if at + 2 > len(data):
        raise VideoError("truncated GIF", "corrupt")
    return int.from_bytes(data[at : at + 2], "little")


def _skip_sub_blocks(data: bytes, at: int) -> int:
    """The offset after the data sub-blocks that start at ``at`` (and their terminator)."""
    while True:
        if at >= len(data):
            raise VideoError("truncated GIF", "corrupt")
        size = data[at]
        at += 1 + size
        if size == 0:
            return at


def _colour_table_size(packed: int) -> int:
    """Bytes of the colour table a logical screen or image descriptor's flags announce."""
    return 3 * 2 ** ((packed & 0x07) + 1) if packed & 0x80 else 0


def _parse_gif(data: bytes) -> tuple[_GifHeader, Iterator[_GifFrame]]:
    """A GIF's header and (lazily) its frames; VideoError on a GIF cut short."""
    if not _is_gif(data) or len(data) < 13:
        raise VideoError("not a GIF", "unsupported")
    packed = data[10]
    end = 13 + _colour_table_size(packed)
    if end > len(data):
        raise VideoError("truncated GIF", "corrupt")
    global_table = data[13:end]
    header = _GifHeader(width=_u16(data, 6), height=_u16(data, 8), loop=_find_loop(data, end))
    return header, _gif_blocks(data, end, global_table)


def _find_loop(data: bytes, at: int) -> int | None:
    """The NETSCAPE loop count among the extensions before the first image, if any."""
    while at + 1 < len(data) and data[at] == 0x21:
        netscape = data[at + 1] == 0xFF and data[at + 3 : at + 14] == _NETSCAPE
        if netscape and data[at + 14 : at + 16] == b"\x03\x01":
            return _u16(data, at + 16)
        at = _skip_sub_blocks(data, at + 2)
    return None


def _gif_blocks(data: bytes, at: int, global_table: bytes) -> Iterator[_GifFrame]:
    """The frames from offset ``at``: each with the delay of the graphic control block
    before it (0 without one) and its colour table made local."""
    delay = 0
    while at < len(data) and data[at] != 0x3B:
        if data[at] == 0x21:  # an extension
            if at + 6 <= len(data) and data[at + 1] == 0xF9:
                delay = _u16(data, at + 4)
            at = _skip_sub_blocks(data, at + 2)
        elif data[at] == 0x2C:  # an image
            if at + 10 > len(data):
                raise VideoError("truncated GIF", "corrupt")
            packed = data[at + 9]
            table_end = at + 10 + _colour_table_size(packed)
            end = _skip_sub_blocks(data, table_end + 1)  # + the LZW minimum code size
            yield _GifFrame(delay, _localised(data, at, packed, table_end, end, global_table))
            delay, at = 0, end
        else:
            raise VideoError(f"corrupt GIF: unknown block 0x{data[at]:02x}", "corrupt")


def _localised(
    data: bytes, at: int, packed: int, table_end: int, end: int, global_table: bytes
) -> bytes:
    """The image at ``data[at:end]`` with a local colour table (the global one if it had
    none), so that it can be moved to another GIF."""
    if packed & 0x80:
        return data[at:end]
    if not global_table:
        raise VideoError("corrupt GIF: an image without a colour table", "corrupt")
    size_bits = (len(global_table) // 3).bit_length() - 2  # 2 ** (bits + 1) entries
    descriptor = data[at : at + 9] + bytes([packed & 0x40 | 0x80 | size_bits])
    return descriptor + global_table + data[table_end:end]


def _gif_head(width: int, height: int, loop: int | None, comment: str | None) -> bytes:
    """A GIF89a header without a global colour table, its loop count and comment."""
    head = b"GIF89a" + width.to_bytes(2, "little") + height.to_bytes(2, "little") + b"\x70\0\0"
    if loop is not None:
        head += b"\x21\xff\x0b" + _NETSCAPE + b"\x03\x01" + loop.to_bytes(2, "little") + b"\0"
    if comment:
        text = comment.encode()
        blocks = b"".join(
            bytes([len(part)]) + part
            for part in (text[i : i + 255] for i in range(0, len(text), 255))
        )
        head += b"\x21\xfe" + blocks + b"\0"
    return head


def _gif_frame(image: bytes, delay_cs: int) -> bytes:
    """A graphic control block (no disposal, opaque, ``delay_cs``) and the image."""
    return b"\x21\xf9\x04\x04" + delay_cs.to_bytes(2, "little") + b"\0\0" + image


def _delay_cs(fps: Fraction) -> int:
    """The GIF delay, in centiseconds, closest to one frame at ``fps`` (at least 2)."""
    return max(2, round(100 / fps))


def _gif_segment(pixels: np.ndarray, fps: Fraction) -> bytes:
    """``(n, H, W, 3)`` uint8 RGB -> an animated GIF, each frame with its own palette."""
    height, width = pixels.shape[1:3]
    parts = [_gif_head(width, height, None, None)]
    for rgb in pixels:
        quantised = Image.fromarray(np.ascontiguousarray(rgb), "RGB").quantize(
            256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.FLOYDSTEINBERG
        )
        one = io.BytesIO()
        quantised.save(one, "GIF", interlace=False, optimize=False)
        _, images = _parse_gif(one.getvalue())
        parts.extend(_gif_frame(frame.image, _delay_cs(fps)) for frame in images)
    parts.append(_GIF_TRAILER)
    return b"".join(parts)


def _assemble_gif(
    segments: Iterable[bytes], source: bytes, fps: Fraction, comment: str | None, out: BinaryIO
) -> None:
    """The segments' frames as one GIF, with the source's frame delays and loop count (a
    frame past the source's last shown ``1 / fps``), and ``comment`` as its comment."""
    source_header, source_frames = _parse_gif(source)
    delays = [frame.delay_cs for frame in source_frames]
    written, size = 0, None
    for index, data in enumerate(segments):
        header, frames = _parse_gif(data)
        if size is None:
            size = header.width, header.height
            out.write(_gif_head(*size, source_header.loop, comment))
        elif (header.width, header.height) != size:
            raise ValueError(f"segment {index} was not encoded like the first one")
        for frame in frames:
            delay = delays[written] if written < len(delays) else _delay_cs(fps)
            out.write(_gif_frame(frame.image, delay))
            written += 1
    if written == 0:
        raise ValueError("no segments to assemble")
    out.write(_GIF_TRAILER)


def _probe_gif(data: bytes, deadline: float) -> VideoInfo:
    """:func:`probe` for a GIF: frames and delays from its blocks, the first frame decoded."""
    header, frames = _parse_gif(data)
    delays = []
    for frame in frames:
        if time.monotonic() > deadline:
            raise VideoError("the GIF could not be read within the time budget", "corrupt")
        delays.append(frame.delay_cs)
    if len(delays) < 2:
        raise VideoError("a GIF of one frame is a still image, not a video", "no_video")
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except (OSError, ValueError, SyntaxError) as error:
        raise VideoError(f"corrupt GIF: {_reason(error)}", "corrupt") from None
    shown_cs = sum(delay if delay >= 2 else _DEFAULT_DELAY_CS for delay in delays)
    fps = Fraction(100 * len(delays), shown_cs)
    return VideoInfo(
        container="gif",
        codec="gif",
        width=header.width,
        height=header.height,
        fps=fps,
        frames=len(delays),
        duration_s=float(len(delays) / fps),
        audio_codec=None,
    )

"""Short clips made for the tests (PyAV and Pillow; nothing downloaded): a red square
moving across a gradient, 64 x 48 px at 25 fps, with a 440 Hz tone (AAC in MP4, MOV and
Matroska, Opus in WebM), an animated GIF of it, audio-only files; and readers of what a
result holds (audio packets, container metadata)."""

from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np
from PIL import Image

WIDTH, HEIGHT, FRAMES, FPS = 64, 48, 20, 25
SAMPLE_RATE = 48_000

#: container -> (PyAV muxer, video encoder, audio encoder) of the test clips.
CLIPS = {
    "mp4": ("mp4", "libx264", "aac"),
    "mov": ("mov", "libx264", "aac"),
    "webm": ("webm", "libvpx-vp9", "libopus"),
    "matroska": ("matroska", "libx264", "aac"),
}


def picture(index: int, height: int = HEIGHT, width: int = WIDTH) -> np.ndarray:
    """``(H, W, 3)`` uint8: a gradient with a red 16 px square 2 px further right each frame."""
    y, x = np.mgrid[0:height, 0:width]
    gradient = [x * 255 // width, y * 255 // height, np.full_like(x, 128)]
    image = np.stack(gradient, axis=-1).astype(np.uint8)
    left = 2 * index % (width - 16)
    image[8:24, left : left + 16] = (230, 30, 30)
    return image


def write_tone(
    output: av.container.OutputContainer, stream: av.audio.stream.AudioStream, seconds: float
) -> None:
    """A 440 Hz mono sine of ``seconds`` encoded into ``stream``."""
    step = stream.codec_context.frame_size or 1024
    total = round(SAMPLE_RATE * seconds)
    for start in range(0, total, step):
        count = min(step, total - start)
        t = np.arange(start, start + count) / SAMPLE_RATE
        samples = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None]
        frame = av.AudioFrame.from_ndarray(samples, format="flt", layout="mono")
        frame.sample_rate, frame.pts = SAMPLE_RATE, start
        output.mux(stream.encode(frame))
    output.mux(stream.encode(None))


def make_clip(
    muxer: str,
    video_codec: str,
    audio_codec: str | None,
    *,
    size: tuple[int, int] = (HEIGHT, WIDTH),
    frames: int = FRAMES,
    rotation: int | None = None,
) -> bytes:
    """A clip of the moving square (x264 with its default B-frames), with a tone."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=muxer) as output:
        video = output.add_stream(video_codec, rate=FPS)
        video.height, video.width = size
        video.pix_fmt = "yuv420p"
        if rotation is not None:
            video.set_display_rotation(rotation)
        audio = None
        if audio_codec is not None:
            audio = output.add_stream(audio_codec, rate=SAMPLE_RATE)
            audio.layout = "mono"
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(picture(index, *size), format="rgb24")
            frame.pts = index
            output.mux(video.encode(frame))
        output.mux(video.encode(None))
        if audio is not None:
            write_tone(output, audio, frames / FPS)
    return buffer.getvalue()


def make_vfr_clip(muxer: str, video_codec: str, audio_codec: str, times: list[Fraction]) -> bytes:
    """A clip of the moving square whose frame ``k`` is shown at ``times[k]`` seconds (a
    variable frame rate: the pts set frame by frame), with a tone as long as the clip."""
    buffer = io.BytesIO()
    time_base = Fraction(1, 1200)  # divides 1/24 and 1/4 s
    with av.open(buffer, "w", format=muxer) as output:
        video = output.add_stream(video_codec, rate=24)
        video.height, video.width = HEIGHT, WIDTH
        video.pix_fmt = "yuv420p"
        video.time_base = video.codec_context.time_base = time_base
        audio = output.add_stream(audio_codec, rate=SAMPLE_RATE)
        audio.layout = "mono"
        for index, at in enumerate(times):
            frame = av.VideoFrame.from_ndarray(picture(index), format="rgb24")
            frame.pts, frame.time_base = round(at / time_base), time_base
            output.mux(video.encode(frame))
        output.mux(video.encode(None))
        write_tone(output, audio, float(times[-1]) + 0.25)
    return buffer.getvalue()


def frame_times(data: bytes) -> list[Fraction]:
    """Each shown frame's time in seconds from the first, in display order."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        stamps = sorted(
            packet.pts * stream.time_base
            for packet in container.demux(stream)
            if packet.size and not packet.is_discard
        )
    return [stamp - stamps[0] for stamp in stamps]


def make_gif(frames: int = 12, delays_ms: list[int] | None = None, loop: int | None = 0) -> bytes:
    """An animated GIF of the moving square (Pillow), 40 ms a frame unless ``delays_ms``."""
    pictures = [Image.fromarray(picture(index)) for index in range(frames)]
    buffer = io.BytesIO()
    options = {} if loop is None else {"loop": loop}
    pictures[0].save(
        buffer,
        "GIF",
        save_all=True,
        append_images=pictures[1:],
        duration=delays_ms or 40,
        **options,
    )
    return buffer.getvalue()


def audio_only(muxer: str, codec: str) -> bytes:
    """A file with a tone and no video track."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=muxer) as output:
        stream = output.add_stream(codec, rate=SAMPLE_RATE)
        stream.layout = "mono"
        write_tone(output, stream, 0.3)
    return buffer.getvalue()


def audio_payloads(data: bytes) -> list[bytes]:
    """The bytes of every audio packet, in order."""
    with av.open(io.BytesIO(data)) as container:
        return [bytes(packet) for packet in container.demux(audio=0) if packet.size]


def container_metadata(data: bytes) -> dict[str, str]:
    """Container metadata, keys in lower case (Matroska's tags come back upper case)."""
    with av.open(io.BytesIO(data)) as container:
        return {key.lower(): value for key, value in container.metadata.items()}

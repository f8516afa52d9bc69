"""Video IO ``models.video``: probe, chunked decoding, segments, assembly with audio copied.

The clips are made by ``tests.clips`` (PyAV and Pillow): a red square moving across a
gradient, 64x48 px, 20 frames at 25 fps, with a 440 Hz tone, and an animated GIF.
"""

from __future__ import annotations

import io
import json
import types
from fractions import Fraction

import av
import numpy as np
import pytest
import torch
from PIL import Image

from models.images import SNIFF_BYTES, sniff
from models.video import (
    VideoError,
    VideoInfo,
    assemble,
    encode_segment,
    fit_size,
    frame_chunks,
    looks_like_video,
    probe,
)
from tests.clips import (
    CLIPS,
    FPS,
    FRAMES,
    HEIGHT,
    SAMPLE_RATE,
    WIDTH,
    audio_only,
    audio_payloads,
    container_metadata,
    frame_times,
    make_clip,
    make_gif,
    make_vfr_clip,
    picture,
    write_tone,
)

pytestmark = pytest.mark.timeout(60)

METADATA = {"comment": json.dumps({"style": "ukiyo-e", "strength": 0.8}), "title": "Atelier"}


@pytest.fixture(scope="module")
def clips() -> dict[str, bytes]:
    """One clip per container, made once for the module."""
    made = {name: make_clip(*spec) for name, spec in CLIPS.items()}
    made["gif"] = make_gif()
    return made


def stylise(data: bytes, chunk: int = 5, **options) -> list[bytes]:
    """The segments of a run over ``data`` with frames passed through unchanged."""
    info = probe(data)
    return [encode_segment(frames, info) for frames in frame_chunks(data, chunk, **options)]


def assembled(segments, source: bytes, metadata: dict[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    assemble(segments, source, probe(source), METADATA if metadata is None else metadata, out)
    return out.getvalue()


def all_frames(data: bytes) -> torch.Tensor:
    return torch.cat(list(frame_chunks(data, 8)))


def gif_delays_ms(data: bytes) -> list[int]:
    with Image.open(io.BytesIO(data)) as image:
        delays = []
        for index in range(image.n_frames):
            image.seek(index)
            delays.append(image.info["duration"])
        return delays


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("container", [*CLIPS, "gif"])
def test_round_trip_keeps_container_frames_rate_size_audio_and_metadata(clips, container):
    source = clips[container]
    info = probe(source)
    assert info.container == container
    segments = (encode_segment(frames, info) for frames in frame_chunks(source, 5))
    result = assembled(segments, source)  # segments consumed from a generator

    again = probe(result)
    assert again.container == container
    assert (again.frames, again.fps, again.width, again.height) == (
        info.frames,
        info.fps,
        info.width,
        info.height,
    )
    assert again.audio_codec == info.audio_codec
    if container == "gif":
        assert info.frames == 12 and info.audio_codec is None
        assert gif_delays_ms(result) == gif_delays_ms(source)
        with Image.open(io.BytesIO(result)) as image:
            assert json.loads(image.info["comment"]) == json.loads(METADATA["comment"])
            assert image.info["loop"] == 0
    else:
        assert info.frames == FRAMES and info.fps == FPS
        assert audio_payloads(result) == audio_payloads(source)
        metadata = container_metadata(result)
        assert json.loads(metadata["comment"]) == json.loads(METADATA["comment"])
        assert metadata["title"] == METADATA["title"]


@pytest.mark.parametrize("container", [*CLIPS, "gif"])
def test_frames_of_the_result_are_close_to_the_source(clips, container):
    source = clips[container]
    before = all_frames(source)
    after = all_frames(assembled(stylise(source), source))
    assert after.shape == before.shape == (probe(source).frames, 3, HEIGHT, WIDTH)
    error = (after.float() - before.float()).abs().mean().item()
    assert error < 6.0, f"{container}: mean abs error {error:.2f}"
    # The square is where it was: a value check, not only counts.
    red = after[:, 0].float() - after[:, 1].float()
    assert red[:, 8:24].mean() > red[:, 30:].mean() + 60


def test_frames_are_the_moving_square(clips):
    frames = all_frames(clips["mp4"])
    assert frames.dtype == torch.uint8 and frames.shape == (FRAMES, 3, HEIGHT, WIDTH)
    reference = torch.stack([torch.from_numpy(picture(i)).permute(2, 0, 1) for i in range(FRAMES)])
    assert (frames.float() - reference.float()).abs().mean() < 4.0


def test_audio_is_interleaved_with_the_video(clips):
    result = assembled(stylise(clips["mp4"]), clips["mp4"])
    with av.open(io.BytesIO(result)) as container:
        kinds = [p.stream.type for p in container.demux() if p.size]
    first_audio, last_video = kinds.index("audio"), len(kinds) - 1 - kinds[::-1].index("video")
    assert first_audio < last_video  # not all the video first
    assert kinds[:10].count("video") >= 2 and kinds[:10].count("audio") >= 2


def test_assemble_writes_to_a_file(clips, tmp_path):
    source = clips["mov"]
    path = tmp_path / f"out{probe(source).suffix()}"
    with path.open("wb") as out:
        assemble(iter(stylise(source, chunk=8)), source, probe(source), METADATA, out)
    assert path.read_bytes() == assembled(stylise(source, chunk=8), source)
    assert probe(path.read_bytes()).frames == FRAMES


def test_gif_keeps_the_source_delays_and_loop_count():
    source = make_gif(frames=6, delays_ms=[40, 80, 40, 120, 40, 60], loop=3)
    info = probe(source)
    assert info.frames == 6 and info.fps == Fraction(600, 38)
    result = assembled(stylise(source, chunk=4), source, {"comment": "hello"})
    assert gif_delays_ms(result) == [40, 80, 40, 120, 40, 60]
    with Image.open(io.BytesIO(result)) as image:
        assert image.info["loop"] == 3 and image.info["comment"] == b"hello"


# -- decoding -------------------------------------------------------------------------------


@pytest.mark.parametrize("container", ["mp4", "webm", "gif"])
def test_start_gives_the_tail_of_a_run_from_zero(clips, container):
    source = clips[container]
    chunks = frame_chunks(source, 5)
    assert isinstance(chunks, types.GeneratorType)  # one chunk in memory at a time
    sizes = []
    whole = []
    for frames in chunks:
        sizes.append(frames.shape[0])
        whole.append(frames)
    assert sum(sizes) == probe(source).frames and max(sizes) == 5
    everything = torch.cat(whole)
    for start in (3, 10):
        tail = torch.cat(list(frame_chunks(source, 4, start=start)))
        assert torch.equal(tail, everything[start:])
    assert torch.equal(torch.cat(list(frame_chunks(source, 7))), everything)  # deterministic


def test_size_resizes_each_frame(clips):
    for container in ("mov", "gif"):
        chunks = list(frame_chunks(clips[container], 8, size=(24, 32)))
        assert all(c.shape[1:] == (3, 24, 32) and c.dtype == torch.uint8 for c in chunks)
        small = torch.cat(chunks).float()
        full = all_frames(clips[container]).float()
        full = torch.nn.functional.interpolate(full, (24, 32), mode="area")
        assert (small - full).abs().mean() < 4.0


def test_chunk_and_start_are_checked(clips):
    with pytest.raises(ValueError):
        frame_chunks(clips["mp4"], 0)
    with pytest.raises(ValueError):
        frame_chunks(clips["mp4"], 4, start=-1)
    assert list(frame_chunks(clips["mp4"], 4, start=FRAMES)) == []


def test_rotated_clip_is_decoded_upright():
    stored = make_clip("mp4", "libx264", None, frames=4, rotation=90)
    info = probe(stored)
    assert (info.width, info.height) == (HEIGHT, WIDTH)  # 48 wide, 64 high, as displayed
    frames = all_frames(stored)
    assert frames.shape == (4, 3, WIDTH, HEIGHT)
    # 90 degrees counter-clockwise: the stored top rows (the square) become the left columns.
    upright = torch.from_numpy(np.rot90(picture(0)).copy()).permute(2, 0, 1)
    assert (frames[0].float() - upright.float()).abs().mean() < 4.0
    assert fit_size(info, 32) == (32, 24)


# -- encoding --------------------------------------------------------------------------------


@pytest.mark.parametrize("container", ["mp4", "webm", "matroska", "gif"])
def test_segments_are_deterministic_and_resume_gives_the_same_file(clips, container):
    source = clips[container]
    first_run = stylise(source)
    second_run = stylise(source)
    assert first_run == second_run  # same frames, same bytes
    # A resumed run: segments 0-1 stored by the first run, the rest encoded afresh from 10.
    resumed = first_run[:2] + stylise(source, start=10)
    assert resumed == first_run
    assert assembled(iter(resumed), source) == assembled(iter(second_run), source)


def test_each_segment_starts_with_a_key_frame_and_has_no_reordering(clips):
    info = probe(clips["mp4"])
    chunk = next(frame_chunks(clips["mp4"], 6, start=7))
    segment = encode_segment(chunk, info)
    with av.open(io.BytesIO(segment)) as container:
        packets = [p for p in container.demux(video=0) if p.size]
        stream = container.streams.video[0]
        assert container.format.name.startswith("mov")
        assert stream.codec_context.name == "h264"
        assert packets[0].is_keyframe
        assert [p.pts for p in packets] == [p.dts for p in packets]
        assert [round(p.pts * p.time_base * FPS) for p in packets] == list(range(6))


def test_odd_sizes_are_floored_to_even_for_h264():
    source = make_clip("mp4", "libvpx-vp9", None, size=(47, 63), frames=6)  # VP9 in MP4
    info = probe(source)
    assert (info.height, info.width, info.codec) == (47, 63, "vp9")
    assert fit_size(info, None) == (46, 62)
    segments = stylise(source, size=fit_size(info, None))
    result = probe(assembled(segments, source))
    assert (result.height, result.width, result.frames) == (46, 62, 6)
    # Frames of an odd size given anyway lose their last row and column.
    odd = next(frame_chunks(source, 6))
    decoded = all_frames(assembled([encode_segment(odd, info)], source))
    assert decoded.shape == (6, 3, 46, 62)
    assert (decoded.float() - odd[:, :, :46, :62].float()).abs().mean() < 6.0


def test_vp9_keeps_odd_sizes():
    source = make_clip("webm", "libvpx-vp9", None, size=(47, 63), frames=4)
    info = probe(source)
    assert fit_size(info, None) == (47, 63)
    result = probe(assembled(stylise(source), source))
    assert (result.height, result.width, result.frames) == (47, 63, 4)


def test_encode_segment_checks_its_frames(clips):
    info = probe(clips["mp4"])
    with pytest.raises(ValueError):
        encode_segment(torch.zeros(2, 3, 8, 8), info)  # float
    with pytest.raises(ValueError):
        encode_segment(torch.zeros(2, 8, 8, 3, dtype=torch.uint8), info)  # channel last
    with pytest.raises(ValueError):
        encode_segment(torch.zeros(0, 3, 8, 8, dtype=torch.uint8), info)


@pytest.mark.parametrize("container", ["mp4", "gif"])
def test_assemble_refuses_segments_of_another_size(clips, container):
    source = clips[container]
    info = probe(source)
    chunks = frame_chunks(source, 5)
    first = encode_segment(next(chunks), info)
    other = encode_segment(next(chunks)[:, :, :32, :32], info)
    with pytest.raises(ValueError):
        assemble([first, other], source, info, {}, io.BytesIO())
    with pytest.raises(ValueError):
        assemble([], source, info, {}, io.BytesIO())


# -- info ------------------------------------------------------------------------------------


def _info(container: str, height: int, width: int) -> VideoInfo:
    return VideoInfo(container, "h264", width, height, Fraction(25), 50, 2.0, None)


def test_fit_size():
    assert fit_size(_info("mp4", 720, 1280), None) == (720, 1280)
    assert fit_size(_info("mp4", 720, 1280), 2000) == (720, 1280)
    assert fit_size(_info("mp4", 720, 1280), 640) == (360, 640)
    assert fit_size(_info("mp4", 1080, 1920), 513) == (288, 512)  # even for H.264
    assert fit_size(_info("webm", 1080, 1920), 513) == (289, 513)
    assert fit_size(_info("gif", 101, 51), 50) == (50, 25)
    assert fit_size(_info("mp4", 4000, 3), 100) == (100, 2)  # never below 2
    with pytest.raises(ValueError):
        fit_size(_info("mp4", 720, 1280), 1)


def test_media_types_and_suffixes():
    expected = {
        "mp4": ("video/mp4", ".mp4"),
        "mov": ("video/quicktime", ".mov"),
        "webm": ("video/webm", ".webm"),
        "matroska": ("video/x-matroska", ".mkv"),
        "gif": ("image/gif", ".gif"),
    }
    for container, (media_type, suffix) in expected.items():
        info = _info(container, 48, 64)
        assert (info.media_type(), info.suffix()) == (media_type, suffix)


def test_probe_describes_each_clip(clips):
    expected = {
        "mp4": ("h264", "aac"),
        "mov": ("h264", "aac"),
        "webm": ("vp9", "opus"),
        "matroska": ("h264", "aac"),
        "gif": ("gif", None),
    }
    for container, (codec, audio) in expected.items():
        info = probe(clips[container])
        assert (info.codec, info.audio_codec, info.width, info.height) == (codec, audio, 64, 48)
        assert info.duration_s == pytest.approx(info.frames / info.fps)


# -- sniffing and errors ---------------------------------------------------------------------


def _image_bytes(fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(picture(0)).save(buffer, fmt)
    return buffer.getvalue()


def test_looks_like_video(clips):
    for container, data in clips.items():
        assert looks_like_video(data), container
    avi = make_clip("avi", "mpeg4", None, frames=3)
    assert looks_like_video(avi)
    assert probe(avi).container == "matroska"  # AVI is written as Matroska
    for fmt in ("PNG", "JPEG", "GIF"):  # a GIF of one frame is a still image
        assert not looks_like_video(_image_bytes(fmt)), fmt
    assert not looks_like_video(b"")
    assert not looks_like_video(np.random.default_rng(0).bytes(4096))


def test_sniff_names_what_an_upload_is_from_its_first_bytes(clips):
    for fmt in ("PNG", "JPEG", "GIF", "BMP", "WEBP"):
        assert sniff(_image_bytes(fmt)[:SNIFF_BYTES]) == fmt.lower(), fmt
    for container, data in clips.items():
        assert sniff(data[:SNIFF_BYTES]) == ("gif" if container == "gif" else "video"), container
    assert sniff(make_clip("avi", "mpeg4", None, frames=3)[:SNIFF_BYTES]) == "video"
    assert sniff(b"\0\0\0\x20ftypM4A \0\0\0\0") is None  # an audio brand
    assert sniff(b"\0\0\0\x1cftypavif\0\0\0\0") is None  # a still image
    assert sniff(b"") is None and sniff(b"RIFF\0\0\0\0WAVE") is None


def _audio_with_cover_art() -> bytes:
    """An AAC .m4a with a JPEG cover: a video stream that is a still picture."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as output:
        audio = output.add_stream("aac", rate=SAMPLE_RATE)
        audio.layout = "mono"
        cover = output.add_stream("mjpeg", rate=1)
        cover.width, cover.height, cover.pix_fmt = WIDTH, HEIGHT, "yuvj420p"
        cover.disposition = av.stream.Disposition.attached_pic
        still = av.VideoFrame.from_ndarray(picture(0), format="rgb24").reformat(format="yuvj420p")
        still.pts = 0
        output.mux(cover.encode(still))
        output.mux(cover.encode(None))
        write_tone(output, audio, 0.3)
    return buffer.getvalue()


def _probe_error(data: bytes) -> VideoError:
    with pytest.raises(VideoError) as caught:
        probe(data, time_budget_s=5.0)
    message = str(caught.value)
    assert message and "\n" not in message
    return caught.value


@pytest.mark.timeout(30)
def test_probe_rejects_what_is_not_a_usable_video(clips):
    assert _probe_error(np.random.default_rng(1).bytes(50_000)).reason == "unsupported"
    assert _probe_error(b"").reason == "unsupported"
    mp4 = clips["mp4"]
    assert _probe_error(mp4[: len(mp4) // 2]).reason in ("corrupt", "unsupported")
    assert _probe_error(audio_only("mp4", "aac")).reason == "no_video"  # an .m4a
    assert _probe_error(audio_only("ogg", "libopus")).reason == "no_video"
    assert _probe_error(_audio_with_cover_art()).reason == "no_video"
    assert _probe_error(_image_bytes("GIF")).reason == "no_video"
    gif = clips["gif"]
    assert _probe_error(gif[: len(gif) // 2]).reason == "corrupt"
    assert _probe_error(_image_bytes("PNG")).reason == "unsupported"


@pytest.mark.timeout(30)
def test_probe_gives_up_past_its_time_budget(clips):
    for container in ("matroska", "gif"):
        with pytest.raises(VideoError) as caught:
            probe(clips[container], time_budget_s=0.0)
        assert caught.value.reason == "corrupt"


@pytest.mark.timeout(30)
def test_a_truncated_stream_is_a_video_error_when_decoding(clips):
    mkv = clips["matroska"]
    cut = mkv[: len(mkv) * 2 // 3]
    with pytest.raises(VideoError):
        list(frame_chunks(mkv[:20], 4))
    frames = sum(c.shape[0] for c in frame_chunks(cut, 4))  # what there is, then the end
    assert 0 < frames < FRAMES


def test_video_error_reasons():
    assert VideoError("x", "no_video").reason == "no_video"
    assert isinstance(VideoError("x", "corrupt"), ValueError)
    with pytest.raises(ValueError):
        VideoError("x", "other")


# -- timing ----------------------------------------------------------------------------------

#: The red team's clip: 24 fps for 1 s, then 4 fps for 3 s.
VFR_TIMES = [Fraction(k, 24) for k in range(24)] + [1 + Fraction(k, 4) for k in range(12)]


@pytest.mark.parametrize("container", ["mp4", "matroska", "webm"])
def test_a_variable_frame_rate_keeps_each_frame_time_and_the_sound_with_it(container):
    muxer, video_codec, audio_codec = CLIPS[container]
    source = make_vfr_clip(muxer, video_codec, audio_codec, VFR_TIMES)
    tick = Fraction(1, 1000)  # Matroska's clock: milliseconds
    assert all(abs(a - b) <= tick for a, b in zip(frame_times(source), VFR_TIMES, strict=True))
    result = assembled(stylise(source, chunk=8), source)
    times = frame_times(result)
    assert len(times) == len(VFR_TIMES)
    frame = Fraction(1, 24)  # the shortest frame
    assert all(abs(got - want) < frame / 2 for got, want in zip(times, VFR_TIMES, strict=True))
    assert abs(times[24] - 1) < frame / 2  # the red team's frame 24 (it moved to 2.6 s)
    assert audio_payloads(result) == audio_payloads(source)
    assert abs(_audio_start(result) - _audio_start(source)) < frame / 2


def _audio_start(data: bytes) -> Fraction:
    """When the sound starts, in seconds from the first shown frame."""
    with av.open(io.BytesIO(data)) as container:
        video, audio = container.streams.video[0], container.streams.audio[0]
        first_video = min(
            p.pts * video.time_base for p in container.demux(video) if p.size and not p.is_discard
        )
    with av.open(io.BytesIO(data)) as container:
        audio = container.streams.audio[0]
        first_audio = min(p.pts * audio.time_base for p in container.demux(audio) if p.size)
    return first_audio - first_video


def test_a_gif_with_a_still_pause_keeps_every_frame():
    """Identical consecutive frames stay frames of their own (Pillow's GIF writer would fold
    them into one): the count, the delays and the loop come back."""
    pictures = [picture(index) for index in (*range(6), *[6] * 4, *range(7, 12))]
    delays = [40 + 10 * (index % 3) for index in range(len(pictures))]
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="gif", options={"loop": "2"}) as output:
        stream = output.add_stream("gif", rate=100)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "rgb8"
        at = 0
        for rgb, delay in zip(pictures, delays, strict=True):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="rgb8")
            frame.pts, at = at, at + delay // 10
            output.mux(stream.encode(frame))
        output.mux(stream.encode(None))
    source = buffer.getvalue()
    assert probe(source).frames == len(pictures) == 15
    result = assembled(stylise(source, chunk=4), source)
    assert gif_delays_ms(result) == gif_delays_ms(source)
    assert len(gif_delays_ms(result)) == 15
    with Image.open(io.BytesIO(result)) as image:
        assert image.info["loop"] == 2

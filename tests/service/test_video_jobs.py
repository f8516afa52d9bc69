"""Video stylize requests (fake model): always a job, frames done of total, the result
file in the clip's own container with its audio, resumption from checkpoints, cancel,
and every bad input or limit with its status.

The fake paints each frame as its negative pulled towards the style's mean, then blends
it with the previous frame's along the motion (``service_fakes.FakeStyleTransfer``), so a
clip's state carries from chunk to chunk as with the real model."""

from __future__ import annotations

import asyncio
import io
import json

import av
import corpus
import numpy as np
import pytest
import torch
from api_headers import ASYNC
from fastapi.testclient import TestClient
from PIL import Image
from service_fakes import Fakes, FakeStyleTransfer, make_settings, wait_until

from models.adain.options import StyleOptions
from models.adain.video import CHUNK_FRAMES, stylize_clip
from models.images import to_float
from models.video import encode_segment, frame_chunks, probe
from service.app import create_app
from service.execution.video import StylizeVideoWork, segment_name
from service.execution.work import Checkpoint, RunContext
from service.metrics import Metrics
from service.priorities import INTERACTIVE
from service.workers.pool import WorkerPool
from service.workers.style_transfer import run_stylize
from tests.clips import (
    CLIPS,
    audio_only,
    audio_payloads,
    container_metadata,
    make_clip,
    make_gif,
)

pytestmark = pytest.mark.timeout(120)


def _post(client, video: bytes, headers=None, name="clip.mp4", **fields):
    files = [("content", (name, video, "application/octet-stream")), ("style", corpus.png(32, 32))]
    data = {k: str(v) for k, v in fields.items()}
    return client.post("/v1/stylize", files=files, data=data, headers=headers or {})


def _finished(client, job_id: str) -> dict:
    wait_until(
        lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] not in ("queued", "running")
    )
    return client.get(f"/v1/jobs/{job_id}").json()


@pytest.fixture(scope="module")
def clip() -> bytes:
    return make_clip(*CLIPS["mp4"], frames=2 * CHUNK_FRAMES + 3)


def test_a_video_sent_without_prefer_async_is_told_to_come_as_a_job(client_factory, clip):
    response = _post(client_factory(), clip)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "send_as_job" and "Prefer: respond-async" in error["message"]


@pytest.mark.parametrize("container", [*CLIPS, "gif"])
def test_a_clip_comes_back_in_its_container_with_its_frames_rate_and_audio(
    client_factory, container
):
    source = make_gif() if container == "gif" else make_clip(*CLIPS[container])
    client = client_factory()
    accepted = _post(client, source, headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    job = _finished(client, accepted.json()["id"])
    assert job["state"] == "succeeded", job
    before = probe(source)
    assert job["progress"]["unit"] == "frame"
    assert job["progress"]["step"] == job["progress"]["total"] == before.frames
    assert "images" not in job["result"]  # a video is fetched from result_url, not inlined
    served = client.get(job["result_url"])
    assert served.status_code == 200
    assert served.headers["content-type"] == before.media_type()
    assert served.headers["content-disposition"].endswith(f'{before.suffix()}"')
    after = probe(served.content)
    assert (after.container, after.frames, after.fps) == (
        before.container,
        before.frames,
        before.fps,
    )
    assert (after.width, after.height, after.audio_codec) == (
        before.width,
        before.height,
        before.audio_codec,
    )
    if before.audio_codec is not None:
        assert audio_payloads(served.content) == audio_payloads(source)  # copied, not re-encoded
    if container != "gif":
        assert json.loads(container_metadata(served.content)["comment"])["frames"] == before.frames
    # the frames are the fake's: the photo's negative pulled towards the style
    ours = next(frame_chunks(served.content, 4)).float()
    photo = next(frame_chunks(source, 4)).float()
    assert (ours - photo).abs().mean() > 40


def test_a_range_request_gets_part_of_the_video(client_factory, clip):
    client = client_factory()
    job = _finished(client, _post(client, clip, headers=ASYNC).json()["id"])
    whole = client.get(job["result_url"]).content
    part = client.get(job["result_url"], headers={"Range": "bytes=10-99"})
    assert part.status_code == 206 and part.content == whole[10:100]


def test_a_cancelled_clip_stops_at_its_next_chunk(client_factory, fakes, clip, tmp_path):
    client = client_factory()
    fake = fakes.adain["cpu"]
    fake.hold = tmp_path / "hold"
    fake.hold.touch()
    fake.frames_before_hold = CHUNK_FRAMES  # the second chunk waits
    accepted = _post(client, clip, headers=ASYNC).json()
    wait_until(
        lambda: client.get(f"/v1/jobs/{accepted['id']}").json()["progress"]["step"] >= CHUNK_FRAMES
    )
    assert client.delete(f"/v1/jobs/{accepted['id']}").status_code in (200, 202)
    fake.hold.unlink()
    job = _finished(client, accepted["id"])
    assert job["state"] == "cancelled"
    assert fake.frames_seen <= 2 * CHUNK_FRAMES  # at most the chunk that was waiting ran


def test_a_clip_is_bulk_work_that_takes_turns_with_a_print(tmp_path, clip):
    """A clip is bulk work, as a print is: with one bulk slot per device, a clip sent
    while a print is painted waits in the queue, a small job sent after it is claimed
    beside the print, and the clip's chunks run on the bulk batcher (whose forwards yield
    the device to every other one)."""
    hold = tmp_path / "hold"
    hold.touch()
    fakes = Fakes(hold=hold)
    settings = make_settings(max_side=2048, bulk_jobs_per_device=1)
    app = create_app(settings, model_entries=fakes.entries())
    photo = corpus.png(1100, 300)  # above the 1024 px base: a print
    with TestClient(app, raise_server_exceptions=False) as client:
        files = [("content", ("p.png", photo, "image/png")), ("style", corpus.png(32, 32))]
        held = client.post("/v1/stylize", files=files, data={"size": "1100"}, headers=ASYNC)
        model = fakes.adain["cpu"]
        wait_until(lambda: len(model.steps_by) >= 1)  # the print runs; its next step waits
        video = _post(client, clip, headers=ASYNC).json()
        files = [
            ("content", ("s.png", corpus.png(64, 48), "image/png")),
            ("style", corpus.png(32, 32)),
        ]
        small = client.post("/v1/stylize", files=files, data={"size": "64"}, headers=ASYNC)

        def state(job_id: str) -> str:
            return str(client.get(f"/v1/jobs/{job_id}").json()["state"])

        try:
            wait_until(lambda: state(small.json()["id"]) == "running")
            assert state(video["id"]) == "queued" and state(held.json()["id"]) == "running"
        finally:
            hold.unlink()
        finals = [_finished(client, job_id) for job_id in (held.json()["id"], video["id"])]
        assert [final["state"] for final in finals] == ["succeeded"] * 2
    assert model.chunk_threads and all("-bulk" in name for name in model.chunk_threads)


# ------------------------------------------------------------------ bad input
def _error(response, status: int, code: str | None = None, *words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if code is not None:
        assert error["code"] == code, error
    for word in words:
        assert word in error["message"], error


def test_corrupt_truncated_and_audio_only_uploads_are_refused_with_a_reason(client_factory, clip):
    client = client_factory()
    garbage = clip[:8] + bytes(range(256)) * 16  # an MP4 header, then noise
    _error(_post(client, garbage, headers=ASYNC), 400, "bad_video", "content")
    _error(_post(client, clip[: len(clip) // 2], headers=ASYNC), 400, "bad_video")
    _error(_post(client, audio_only("mp4", "aac"), headers=ASYNC), 415, "no_video_track")


@pytest.mark.parametrize(
    ("setting", "value", "name"),
    [
        ("max_video_frames", 10, "max_video_frames"),
        ("max_video_seconds", 0.5, "max_video_seconds"),
        ("max_video_fps", 20.0, "max_video_fps"),
        ("max_video_pixels", 10_000, "max_video_pixels"),
    ],
)
def test_a_clip_over_a_limit_is_refused_naming_it(client_factory, clip, setting, value, name):
    client = client_factory(**{setting: value})
    _error(_post(client, clip, headers=ASYNC), 422, None, name)


def test_a_clip_larger_than_max_video_side_is_refused_unless_scaled_down(client_factory, clip):
    client = client_factory(max_video_side=32)
    _error(_post(client, clip, headers=ASYNC), 422, None, "max_video_side", "size=32")
    accepted = _post(client, clip, headers=ASYNC, size=32)
    assert accepted.status_code == 202, accepted.text
    job = _finished(client, accepted.json()["id"])
    info = probe(client.get(job["result_url"]).content)
    assert max(info.width, info.height) == 32


def test_a_video_over_the_upload_limit_is_413(client_factory, clip):
    client = client_factory(max_stylize_upload_bytes=len(clip) // 2)
    _error(_post(client, clip, headers=ASYNC), 413)


def test_masks_are_refused_for_a_video(client_factory, clip):
    files = [
        ("content", ("clip.mp4", clip, "video/mp4")),
        ("style", corpus.png(32, 32)),
        ("mask", corpus.png(32, 32)),
    ]
    response = client_factory().post("/v1/stylize", files=files, headers=ASYNC)
    _error(response, 422, None, "mask")


def test_limits_name_the_video_limits(client_factory):
    limits = client_factory(max_video_seconds=12.0).get("/v1/limits").json()
    assert limits["video"]["max_seconds"] == 12.0


def test_a_photo_still_gets_its_default_size(client_factory):
    response = client_factory().post(
        "/v1/stylize",
        files=[("content", corpus.png(600, 300)), ("style", corpus.png(32, 32))],
    )
    assert response.status_code == 200
    assert Image.open(io.BytesIO(response.content)).size == (512, 256)


def test_frames_of_a_result_are_not_all_equal(client_factory, clip):
    """The fake's blend carries the clip's state: consecutive frames differ where the
    square moved, and agree elsewhere (a sanity check that frames are not duplicated)."""
    client = client_factory()
    job = _finished(client, _post(client, clip, headers=ASYNC).json()["id"])
    frames = np.concatenate(
        [chunk.numpy() for chunk in frame_chunks(client.get(job["result_url"]).content, 8)]
    )
    assert len(frames) == probe(clip).frames
    assert not np.array_equal(frames[0], frames[-1])


def test_a_stream_that_breaks_mid_clip_fails_its_job_as_bad_video():
    from models.video import VideoError
    from service.errors import BadVideo
    from service.execution.video import _decoded

    def broken():
        yield torch.zeros(1, 3, 2, 2, dtype=torch.uint8)
        raise VideoError("the stream ends inside frame 9", "corrupt")

    chunks = _decoded(broken())
    assert next(chunks).shape == (1, 3, 2, 2)  # the chunks before the break come through
    with pytest.raises(BadVideo, match="frame 9") as caught:
        next(chunks)
    assert caught.value.code == "bad_video"


@pytest.mark.parametrize("size", [(1, 1), (2, 2), (2, 1280)])
def test_a_tiny_or_extreme_aspect_clip_gets_a_photos_rule(client_factory, size):
    """1x1 was a 500 (fit_size), 2x2 and 1280x2 were accepted: each is now a 422 that
    states the 16 px and 64:1 rule photos have."""
    clip = make_clip(*CLIPS["webm"], size=size, frames=3)  # VP9: odd and tiny sizes
    response = _post(client_factory(), clip, headers=ASYNC, name="clip.webm")
    _error(response, 422, None, "16 px", "64:1")


def test_a_raw_h264_stream_named_mp4_is_told_the_video_formats(client_factory):
    """An Annex B stream (no container) named clip.mp4: a 415 that names the video
    containers, not only the image formats."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="h264") as output:
        stream = output.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for index in range(3):
            frame = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
            frame.pts = index
            output.mux(stream.encode(frame))
        output.mux(stream.encode(None))
    response = _post(client_factory(), buffer.getvalue(), name="clip.mp4")
    _error(response, 415, "unsupported_image_type", "MP4", "WebM", "PNG")


class _Kept(Checkpoint):
    """Checkpoints kept in memory."""

    def __init__(self) -> None:
        self.saved: dict[str, bytes] = {}

    async def load(self, name: str) -> bytes | None:
        return self.saved.get(name)

    async def save(self, name: str, data: bytes) -> bool:
        self.saved[name] = data
        return True


def test_the_cli_and_a_job_paint_a_clip_into_the_same_segments(clip):
    """The CLI's loop (``stylize_clip``: each chunk painted in this process) and a job's
    (``StylizeVideoWork.run``: each chunk sent to a worker pool) are the same walk: the
    clip's encoded segments are equal byte for byte."""
    info = probe(clip)
    size = (info.height, info.width)
    style = torch.arange(3 * 16 * 16, dtype=torch.int64).remainder(251).to(torch.uint8)
    style = style.reshape(3, 16, 16)
    options = StyleOptions(alpha=0.7, preset="realtime")
    chunks = frame_chunks(clip, CHUNK_FRAMES, size=size)
    painted = stylize_clip(FakeStyleTransfer(), chunks, [to_float(style)[None]], options)
    cli = [encode_segment(frames, info) for frames, _ in painted]

    kept = _Kept()
    work = StylizeVideoWork(clip, info, size, (style,), options, {})

    async def job() -> None:
        pool = WorkerPool(
            "adain", {"cpu": FakeStyleTransfer()}, run_stylize, make_settings(), Metrics()
        )
        pool.start()
        try:
            context = RunContext(
                INTERACTIVE, timeout_s=None, progress=None, owner="", checkpoint=kept
            )
            await work.run(pool, context)
        finally:
            await pool.close()

    asyncio.run(job())
    assert len(cli) == -(-info.frames // CHUNK_FRAMES) == 3
    assert [kept.saved[segment_name(index)] for index in range(len(cli))] == cli
    assert len(set(cli)) == len(cli)

"""Each call of ``atelier_client`` against a real server (uvicorn on 127.0.0.1) around the
fake models: a still answered at once and as a job, a print and a 2 s video followed to
their end with progress events, generate, jobs (get, list, cancel, wait), results with
``Range`` resume, errors as their code's class, and the async client.

The fakes compute checkable pictures (``tests/service/service_fakes.py``): a still is
``(1 - alpha) content + alpha x`` the paintings' weighted mean colour, a print is the
photo's negative, a generated image is noise from its seed."""

from __future__ import annotations

import asyncio
import io
import threading

import av
import httpx
import numpy as np
import pytest
from atelier_client import (
    AsyncClient,
    Client,
    JobNotFound,
    Progress,
    Result,
    ValidationError,
)
from client_helpers import noise_png, pixels_of, solid_png
from service_fakes import FakeTextToImage

from tests.clips import CLIPS, make_clip

pytestmark = pytest.mark.timeout(120)

PHOTO, PAINTING, OTHER = (200, 40, 40), (20, 20, 220), (20, 220, 20)


def _blend(alpha: float, *colours: tuple[tuple[int, int, int], float]) -> np.ndarray:
    """The fake's still: ``(1 - alpha) PHOTO + alpha sum_i w_i colour_i``."""
    styled = sum(np.array(colour, float) * weight for colour, weight in colours)
    return np.round((1 - alpha) * np.array(PHOTO, float) + alpha * styled)


def test_a_still_is_answered_at_once_as_bytes_an_image_and_a_file(fake_server, tmp_path):
    with Client(fake_server.url) as client:
        result = client.stylize(solid_png(PHOTO), solid_png(PAINTING), alpha=0.5, size=48)
        written = client.stylize(
            solid_png(PHOTO), [solid_png(PAINTING)], alpha=0.5, size=48, output=tmp_path / "o.png"
        )
    assert result.job is None and result.media_type == "image/png"
    pixels = pixels_of(result.content)
    assert pixels.shape == (32, 48, 3)
    np.testing.assert_allclose(
        pixels, np.broadcast_to(_blend(0.5, (PAINTING, 1.0)), (32, 48, 3)), atol=1
    )
    assert np.asarray(result.image()).shape == (32, 48, 3)
    assert written.path == tmp_path / "o.png" and written.content == result.content


def test_two_paintings_weighted_and_the_format_reach_the_model(fake_server):
    with Client(fake_server.url) as client:
        result = client.stylize(
            solid_png(PHOTO),
            [solid_png(PAINTING), solid_png(OTHER)],
            style_weights=[3, 1],
            alpha=1.0,
            format="webp",
            quality=100,
        )
    assert result.media_type == "image/webp"
    expected = _blend(1.0, (PAINTING, 0.75), (OTHER, 0.25))
    assert np.abs(pixels_of(result.content)[16, 24] - expected).max() <= 3


def test_a_still_as_a_job_reports_its_passes_and_gives_the_same_picture(fake_server):
    seen: list[Progress] = []
    with Client(fake_server.url) as client:
        now = client.stylize(solid_png(PHOTO), solid_png(PAINTING), alpha=0.5)
        job = client.stylize(solid_png(PHOTO), solid_png(PAINTING), alpha=0.5, progress=seen.append)
    assert job.job is not None and job.job.state == "succeeded" and job.job.kind == "stylize"
    assert job.content == now.content
    assert seen and seen[-1].step == seen[-1].total > 0 and seen[-1].unit == "pass"
    assert [p.step for p in seen] == sorted(p.step for p in seen)


def test_a_print_goes_as_a_job_by_itself_with_tile_progress(fake_server, tmp_path):
    photo, pixels = noise_png(1100, 300, seed=3)
    seen: list[Progress] = []
    with Client(fake_server.url) as client:
        result = client.stylize(
            photo,
            solid_png(PAINTING),
            size=1100,
            output=tmp_path / "print.png",
            progress=seen.append,
        )
    assert result.job is not None and result.path is not None
    painted = pixels_of(result.path.read_bytes())
    assert painted.shape == (300, 1100, 3)
    np.testing.assert_array_equal(painted, 255 - pixels.astype(int))  # the fake print
    assert {p.unit for p in seen if p.total} == {"tile"}
    assert seen[-1].step == seen[-1].total > 1


def test_a_two_second_video_is_a_job_whose_frames_count_up(fake_server, tmp_path):
    clip = make_clip(*CLIPS["mp4"], frames=50)  # 2 s at 25 fps
    seen: list[Progress] = []
    with Client(fake_server.url) as client:
        result = client.stylize(
            clip, solid_png(PAINTING), output=tmp_path / "painted.mp4", progress=seen.append
        )
    assert result.media_type == "video/mp4" and result.job is not None
    with av.open(str(result.path)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 50
    frames = [p for p in seen if p.unit == "frame"]
    assert frames[-1].step == frames[-1].total == 50
    assert len({p.step for p in frames}) >= 2  # more than the last event


def test_generate_at_once_and_as_a_job_draw_each_seed(fake_server):
    steps: list[Progress] = []
    with Client(fake_server.url) as client:
        prompt = "a red circle above a cat"
        now = client.generate(prompt, seed=5, num_images=2, steps=3)
        job = client.generate(prompt, seed=5, num_images=2, steps=3, progress=steps.append)
    for result in (now, job):
        assert result.seeds == [5, 6]
        for data, seed in zip(result.images, result.seeds, strict=True):
            np.testing.assert_array_equal(pixels_of(data), FakeTextToImage.pixels(seed))
        assert result.understood == prompt
        assert result.not_learned == ["cat"]  # the fake reads as the shapes model
    assert now.job is None and job.job is not None
    assert steps[-1] == Progress("sampler step", 3, 3, 1.0)


def test_jobs_get_list_wait_result_and_forget(fake_server):
    with Client(fake_server.url) as client:
        job = client.submit_generate("a blue square", seed=11, num_images=2, steps=2)
        assert job.state in ("queued", "running", "succeeded")
        done = client.wait(job)
        assert done.state == "succeeded" and client.job(job.id).state == "succeeded"
        assert job.id in [listed.id for listed in client.jobs(limit=100).jobs]
        np.testing.assert_array_equal(
            pixels_of(client.result(job, index=1)), FakeTextToImage.pixels(12)
        )
        assert client.cancel(job) is None  # a finished job: forgotten
        with pytest.raises(JobNotFound) as caught:
            client.job(job.id)
    assert caught.value.status == 404 and job.id in caught.value.message


def test_a_running_job_is_cancelled(fake_server):
    fake = fake_server.fakes.adain["cpu"]
    fake.gate, fake.entered = threading.Event(), threading.Event()
    try:
        with Client(fake_server.url) as client:
            job = client.submit_stylize(solid_png(PHOTO), solid_png(PAINTING))
            assert fake.entered.wait(10)  # the job is in the model, held there
            asked = client.cancel(job)
            assert asked is not None and asked.raw["cancel_requested"]
            fake.gate.set()
            assert client.wait(job, timeout=30).state == "cancelled"
    finally:
        fake.gate.set()
        fake.gate = None


def test_a_download_resumes_with_a_range_from_its_part_file(fake_server, tmp_path):
    with Client(fake_server.url) as client:
        job = client.wait(client.submit_generate("a red circle", seed=1, steps=2))
        whole = client.result(job)
        # a part that is not the result's prefix shows that only the rest was fetched
        part = tmp_path / f"out.png.{job.id}-0.part"
        part.write_bytes(b"x" * 100)
        path = client.download(job, tmp_path / "out.png")
    assert path.read_bytes() == b"x" * 100 + whole[100:]
    assert not part.exists()


class _CutOnce(httpx.BaseTransport):
    """The real transport, but the first result download breaks after its first bytes."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.ranges: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if not request.url.path.endswith("/result"):
            return response
        self.ranges.append(request.headers.get("range"))
        if len(self.ranges) > 1:
            return response
        first = next(iter(response.stream))[:64]

        class Broken(httpx.SyncByteStream):
            def __iter__(self):
                yield first
                raise httpx.ReadError("connection reset")

        return httpx.Response(response.status_code, headers=response.headers, stream=Broken())


def test_a_download_broken_midway_resumes_where_it_stopped(fake_server):
    with Client(fake_server.url) as plain:
        job = plain.wait(plain.submit_stylize(noise_png(300, 200)[0], solid_png(PAINTING)))
        whole = plain.result(job)
    transport = _CutOnce()
    with Client(fake_server.url, transport=transport) as client:
        assert client.result(job) == whole
    assert transport.ranges == [None, "bytes=64-"]


def test_errors_are_their_codes_class_with_the_servers_message(fake_server):
    with Client(fake_server.url) as client:
        with pytest.raises(ValidationError) as caught:
            client.stylize(solid_png(PHOTO), solid_png(PAINTING), alpha=2.0)
        assert caught.value.status == 422 and "alpha" in caught.value.message
        with pytest.raises(TypeError, match="unknown option"):
            client.stylize(solid_png(PHOTO), solid_png(PAINTING), strength=1.0)  # type: ignore[call-arg]
        with pytest.raises(JobNotFound):
            client.wait("no-such-job")


def test_the_async_client_makes_the_same_calls(fake_server):
    async def main() -> tuple[Result, list[Progress], list[str], bytes]:
        seen: list[Progress] = []
        async with AsyncClient(fake_server.url) as client:
            result = await client.stylize(
                solid_png(PHOTO), solid_png(PAINTING), alpha=0.5, progress=seen.append
            )
            generated = await client.generate("a red circle", seed=2, steps=2)
            job = await client.wait(await client.submit_generate("a red circle", seed=2, steps=2))
            listed = [j.id for j in (await client.jobs()).jobs]
            assert (await client.result(job)) == generated.images[0]
            assert (await client.cancel(job)) is None
            return result, seen, listed, generated.images[0]

    result, seen, listed, image = asyncio.run(main())
    np.testing.assert_allclose(
        pixels_of(result.content)[0, 0], _blend(0.5, (PAINTING, 1.0)), atol=1
    )
    assert result.job is not None and result.job.id in listed
    assert seen[-1].step == seen[-1].total
    np.testing.assert_array_equal(pixels_of(image), FakeTextToImage.pixels(2))


def test_the_job_of_a_held_model_is_followed_through_its_steps(fake_server):
    """Progress arrives while the job runs, not only at its end: the fake waits before
    its second step while the hold file exists; the test lets it go once the follower
    heard of the job."""
    fake_server.hold.touch()
    seen: list[Progress] = []
    first = threading.Event()

    def report(progress: Progress) -> None:
        seen.append(progress)
        first.set()

    try:
        with Client(fake_server.url) as client:
            job = client.submit_generate("a red circle", seed=3, steps=4)
            follower = threading.Thread(target=lambda: client.wait(job, progress=report))
            follower.start()
            assert first.wait(20)
            assert not client.job(job).finished
            fake_server.hold.unlink()
            follower.join(30)
        assert len(seen) >= 2 and seen[0].step < 4 and seen[-1].step == 4
    finally:
        fake_server.hold.unlink(missing_ok=True)


def test_inputs_may_be_paths_or_file_objects(fake_server, tmp_path):
    (tmp_path / "photo.png").write_bytes(solid_png(PHOTO))
    with Client(fake_server.url) as client:
        from_path = client.stylize(tmp_path / "photo.png", io.BytesIO(solid_png(PAINTING)))
        from_bytes = client.stylize(solid_png(PHOTO), solid_png(PAINTING))
    assert from_path.content == from_bytes.content


def test_a_request_the_server_answers_send_as_job_is_sent_again_as_a_job(fake_server):
    """A 1024 px photo with four paintings at twice their scale costs over the budget of
    a request answered at once (but not a job's; a print is costed at the side it is
    painted at, so the photo must be that large): the server answers 422 send_as_job,
    the client sends it again as a job and returns its result."""
    seen: list[Progress] = []
    paintings = [solid_png(PAINTING)] * 4
    photo = solid_png(PHOTO, 1024, 683)
    with Client(fake_server.url) as client:
        result = client.stylize(photo, paintings, size=1024, style_scale=2.0)
        seen_job = client.stylize(
            photo, paintings, size=1024, style_scale=2.0, progress=seen.append
        )
    assert result.job is not None and result.job.state == "succeeded"
    assert result.content == seen_job.content and seen


def test_the_async_client_resumes_a_download_and_writes_a_print(fake_server, tmp_path):
    photo, pixels = noise_png(1100, 300, seed=5)

    async def main() -> tuple[bytes, bytes, Result]:
        async with AsyncClient(fake_server.url) as client:
            job = await client.wait(await client.submit_generate("a red circle", seed=1))
            whole = await client.result(job)
            (tmp_path / f"out.png.{job.id}-0.part").write_bytes(b"y" * 50)
            path = await client.download(job, tmp_path / "out.png")
            printed = await client.stylize(
                photo, solid_png(PAINTING), size=1100, output=tmp_path / "print.png"
            )
            return whole, path.read_bytes(), printed

    whole, resumed, printed = asyncio.run(main())
    assert resumed == b"y" * 50 + whole[50:]
    assert printed.job is not None and printed.path == tmp_path / "print.png"
    np.testing.assert_array_equal(pixels_of(printed.content), 255 - pixels.astype(int))

"""Print-size stylize requests (fake model): the synchronous and job budgets, the steps
through the batcher with progress in tiles, cancel between tiles, the result file.

The fake paints a photo above 1024 px as its negative, one band of rows a step
(``service_fakes.FakePrintSession``); long work is long by construction (a hold file)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import io
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import corpus
import numpy as np
import pytest
from api_headers import ASYNC
from fastapi.testclient import TestClient
from PIL import Image
from service_fakes import FAKE_BAND_ROWS, Fakes, make_settings, wait_until

import models.disk_picture as disk_picture
from service.app import create_app
from service.execution import stylize as stylize_execution

pytestmark = pytest.mark.timeout(60)
WIDTH, HEIGHT = 1100, 300  # above the 1024 px base: painted by print-size steps


def _post(client, content: bytes, headers=None, **fields):
    files = [("content", ("c.png", content, "image/png")), ("style", corpus.png(32, 32))]
    data = {"size": str(WIDTH)} | {k: str(v) for k, v in fields.items()}
    return client.post("/v1/stylize", files=files, data=data, headers=headers or {})


def _done(client, job_id: str) -> dict:
    """The job's JSON once it is final (one read per look: a queued job may start
    running between two reads)."""
    wait_until(
        lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] not in ("queued", "running")
    )
    return client.get(f"/v1/jobs/{job_id}").json()


@contextlib.contextmanager
def _held_job(
    tmp_path: Path, content: bytes, **settings: Any
) -> Iterator[tuple[TestClient, Fakes, dict[str, Any], Path]]:
    """A print-size job of ``content`` on a 2048-px server (and ``settings``) whose fake
    model waits while the hold file exists: yields the client, the fakes, the job (its 202
    body) and the hold file (unlink it to let the job go on)."""
    hold = tmp_path / "hold"
    hold.touch()
    fakes = Fakes(hold=hold)
    app = create_app(make_settings(max_side=2048, **settings), model_entries=fakes.entries())
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, fakes, _post(client, content, headers=ASYNC).json(), hold


@pytest.fixture
def photo() -> tuple[bytes, np.ndarray]:
    image = corpus.noise_rgb(WIDTH, HEIGHT, seed=4)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue(), np.asarray(image)


def _flat_png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (90, 120, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_a_print_size_request_over_the_sync_budget_is_told_to_come_as_a_job(client_factory):
    client = client_factory(max_side=2048)
    # 1024^2 x 2 x 1.328125 + 2048^2 = 6,979,322 pixel-passes > 6,500,000
    response = _post(client, _flat_png(2048, 300), size=2048)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "send_as_job"
    assert (
        "Prefer: respond-async" in error["message"]
        and "max_stylize_pixel_passes" in error["message"]
    )


def test_a_photo_smaller_than_the_size_asked_is_charged_as_it_is_painted(client_factory, photo):
    """The 1100 px photo sent with ``size=2048`` is painted at 1100 px (never enlarged):
    charged as that (within the budget for an answer at once, where 2048 px is not)."""
    client = client_factory(max_side=2048)
    response = _post(client, photo[0], size=2048)
    assert response.status_code == 200, response.text
    pixels = np.asarray(Image.open(io.BytesIO(response.content)).convert("RGB"))
    assert np.array_equal(pixels, 255 - photo[1])  # painted whole, at its own 1100 px
    assert _post(client, _flat_png(2048, 300), size=2048).status_code == 422  # painted whole


def test_a_print_size_job_runs_its_tiles_and_serves_the_image_as_a_file(client_factory, photo):
    client = client_factory(max_side=2048)
    accepted = _post(client, photo[0], headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    job = _done(client, accepted.json()["id"])
    assert job["state"] == "succeeded"
    bands = -(-HEIGHT // FAKE_BAND_ROWS)
    assert job["progress"] == {
        "unit": "tile",
        "step": 1 + bands,
        "total": 1 + bands,
        "fraction": 1.0,
    }
    assert job["result_url"] == f"/v1/jobs/{job['id']}/result"
    served = client.get(job["result_url"])
    assert served.status_code == 200 and served.headers["content-type"] == "image/png"
    assert served.headers["accept-ranges"] == "bytes"
    pixels = np.asarray(Image.open(io.BytesIO(served.content)).convert("RGB"))
    assert np.array_equal(pixels, 255 - photo[1])  # every band painted, in its place
    part = client.get(job["result_url"], headers={"Range": "bytes=10-19"})
    assert part.status_code == 206 and part.content == served.content[10:20]
    assert part.headers["content-range"] == f"bytes 10-19/{len(served.content)}"
    tail = client.get(job["result_url"], headers={"Range": "bytes=-5"})
    assert tail.status_code == 206 and tail.content == served.content[-5:]
    outside = client.get(job["result_url"], headers={"Range": f"bytes={len(served.content)}-"})
    assert outside.status_code == 416
    assert outside.headers["content-range"] == f"bytes */{len(served.content)}"
    assert client.get(f"{job['result_url']}?index=1").status_code == 404


def test_a_corrupt_print_photo_is_refused_at_the_submit(client_factory):
    """A print's photo is only checked in its request (the worker decodes it), and the
    check finds what a decode finds: a cut JPEG answers 400 and accepts nothing."""
    buffer = io.BytesIO()
    corpus.noise_rgb(WIDTH, HEIGHT, seed=5).save(buffer, format="JPEG")
    client = client_factory(max_side=2048)
    refused = _post(client, buffer.getvalue()[: buffer.tell() // 2], headers=ASYNC)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "corrupt_image"
    assert client.get("/v1/jobs").json()["jobs"] == []


@pytest.mark.parametrize(
    ("room_for", "message"),
    [
        (0, "content: the photo could not be kept"),  # the worker's decode of the upload
        (1, "the print could not be painted"),  # its first octave's output
    ],
)
def test_a_print_with_no_room_for_its_pictures_fails_once_with_storage_full(
    client_factory, photo, monkeypatch, room_for, message
):
    """Room for ``room_for`` pictures: the submit keeps nothing on disk (its photo is
    checked, and travels as uploaded), so it is accepted; the job fails with
    ``storage_full`` after one attempt, saying so in our words."""
    reserve = disk_picture.os.posix_fallocate
    made = []

    def full_after(fd, offset, length):
        made.append(length)
        if len(made) > room_for:
            raise OSError(errno.ENOSPC, "No space left on device")
        reserve(fd, offset, length)

    monkeypatch.setattr(disk_picture.os, "posix_fallocate", full_after)
    assert _failed_once_for_room(client_factory(max_side=2048), photo[0]) == (
        f"{message}: no room for a 1 MB picture in {tempfile.gettempdir()}"
    )


def test_a_print_whose_png_has_no_room_fails_once_with_storage_full(
    client_factory, photo, monkeypatch
):
    """The print's PNG goes through a file in the temporary folder past ``SPOOL_BYTES``:
    no room there fails the job once with ``storage_full``, in our words."""
    from models import png

    spooled = png.tempfile.SpooledTemporaryFile

    class Full(spooled):  # type: ignore[misc, valid-type]
        def rollover(self) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(png, "SPOOL_BYTES", 100_000)  # past the 1 MB print, not its style
    monkeypatch.setattr(png.tempfile, "SpooledTemporaryFile", Full)
    assert _failed_once_for_room(client_factory(max_side=2048), photo[0]) == (
        f"the print could not be encoded: no room for a PNG in {tempfile.gettempdir()}"
    )


def _failed_once_for_room(client, photo: bytes) -> str:
    """The print is accepted (its submit keeps nothing on disk) and fails after one
    attempt with ``storage_full``; returns the error's message."""
    accepted = _post(client, photo, headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    job = _done(client, accepted.json()["id"])
    assert job["state"] == "failed" and job["attempts"] == 1
    assert job["error"]["code"] == "storage_full"
    return job["error"]["message"]


def test_a_big_result_is_linked_from_the_jobs_json_not_embedded(client_factory, photo, monkeypatch):
    """A result over ``INLINE_RESULT_MAX_BYTES`` (here lowered under the 1 MB print) is
    named by its size in the job's JSON and read from ``result_url``; a small one stays
    inline."""
    from service.routes import jobs

    monkeypatch.setattr(jobs, "INLINE_RESULT_MAX_BYTES", 100_000)
    client = client_factory(max_side=2048)
    job = _done(client, _post(client, photo[0], headers=ASYNC).json()["id"])
    served = client.get(job["result_url"]).content
    assert len(served) > 100_000
    assert "images" not in job["result"]
    assert job["result"]["file_bytes"] == [len(served)]
    assert job["result"]["media_type"] == "image/png"
    small = _done(client, _post(client, corpus.png(64, 48), size=64, headers=ASYNC).json()["id"])
    image = base64.b64decode(small["result"]["images"][0])
    assert image == client.get(small["result_url"]).content


def test_the_result_file_of_an_unfinished_job_is_a_409(tmp_path, photo):
    with _held_job(tmp_path, photo[0]) as (client, fakes, job, hold):
        response = client.get(f"/v1/jobs/{job['id']}/result")
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "job_not_succeeded"
        hold.unlink()
        assert _done(client, job["id"])["state"] == "succeeded"


def test_cancel_stops_a_print_size_job_at_its_next_step(tmp_path, photo):
    with _held_job(tmp_path, photo[0]) as (client, fakes, job, hold):
        model = fakes.adain["cpu"]
        wait_until(lambda: len(model.steps_by) >= 1)  # the base ran; the first band waits
        stopped = client.delete(f"/v1/jobs/{job['id']}")
        assert stopped.status_code in (200, 202)
        hold.unlink()
        final = _done(client, job["id"])
        assert final["state"] == "cancelled"
        steps = len(model.steps_by)
        assert steps <= 1 + 2  # the base and at most the steps already in flight
        bands = -(-HEIGHT // FAKE_BAND_ROWS)
        assert final["progress"]["step"] < 1 + bands


def test_a_small_job_waits_for_one_step_of_a_print_not_for_the_print(tmp_path, photo):
    """A print's steps are bulk work: a small async job sent while one of them runs waits
    for that step alone, and the print's next steps (one of them queued already) go
    after it."""
    with _held_job(tmp_path, photo[0]) as (client, fakes, job, hold):
        model = fakes.adain["cpu"]
        batchers = client.app.state.pools["adain"].batchers["cpu"]
        # the base ran; the first band runs (held) and the second waits behind it
        wait_until(lambda: len(model.steps_by) == 1 and batchers["bulk"].load == 2)
        assert batchers["background"].load == 0
        small = _post(client, corpus.png(64, 48), size=64, headers=ASYNC).json()
        gate = batchers["background"]._gate
        wait_until(lambda: gate.waiting(1) == 1)  # its forward waits for the band in progress
        hold.unlink()
        assert _done(client, small["id"])["state"] == "succeeded"
        assert _done(client, job["id"])["state"] == "succeeded"
    kinds = [kind for kind, _ in model.steps_by]
    small_steps = [index for index, kind in enumerate(kinds) if kind == "background"]
    print_steps = [index for index, kind in enumerate(kinds) if kind == "print"]
    assert len(print_steps) == 1 + -(-HEIGHT // FAKE_BAND_ROWS) and small_steps
    assert print_steps[:2] == [0, 1]  # the base and the band that was running
    assert all(index > small_steps[-1] for index in print_steps[2:])
    assert [name[: len("bulk-cpu")] for name in model.print_threads] == ["bulk-cpu"]


@pytest.mark.parametrize("per_device", [1, 2])
def test_a_replica_paints_bulk_jobs_per_device_prints_at_once(tmp_path, photo, per_device):
    """Each print holds its picture in memory: a replica runs ``bulk_jobs_per_device``
    at once; another print waits in the queue (for any replica) while a small job sent
    after it is claimed beside the running one."""
    with _held_job(tmp_path, photo[0], bulk_jobs_per_device=per_device) as held:
        client, fakes, first, hold = held
        wait_until(lambda: len(fakes.adain["cpu"].steps_by) >= 1)  # the first print runs
        second = _post(client, photo[0], headers=ASYNC).json()
        small = _post(client, corpus.png(64, 48), size=64, headers=ASYNC).json()

        def state(job: dict[str, Any]) -> str:
            return str(client.get(f"/v1/jobs/{job['id']}").json()["state"])

        wait_until(lambda: state(small) == "running")
        if per_device == 2:
            wait_until(lambda: state(second) == "running")
        else:
            assert state(second) == "queued" and state(first) == "running"
        hold.unlink()
        assert [_done(client, job["id"])["state"] for job in (first, second, small)] == [
            "succeeded"
        ] * 3


def test_the_next_print_is_painted_while_the_last_ones_result_is_encoded(
    client_factory, photo, monkeypatch
):
    """A print holds its bulk slot while it is painted, not while its picture is encoded
    and stored: with one slot, the second print runs while the first one's encoding is
    held."""
    encoding, release = threading.Event(), threading.Event()
    encode = stylize_execution.encode_image

    def held_encode(*args: Any, **keywords: Any) -> tuple[bytes, str]:
        encoding.set()
        release.wait(30)
        return encode(*args, **keywords)

    monkeypatch.setattr(stylize_execution, "encode_image", held_encode)
    client = client_factory(max_side=2048, bulk_jobs_per_device=1)
    first = _post(client, photo[0], headers=ASYNC).json()
    wait_until(encoding.is_set)
    second = _post(client, photo[0], headers=ASYNC).json()

    def state(job: dict[str, Any]) -> str:
        return str(client.get(f"/v1/jobs/{job['id']}").json()["state"])

    try:
        wait_until(lambda: state(second) == "running")
        assert state(first) == "running"  # still encoding
    finally:
        release.set()
    assert [_done(client, job["id"])["state"] for job in (first, second)] == ["succeeded"] * 2


class _CountedLock:
    """:func:`~service.execution.stylize.whole_picture`'s lock, counting the times it was
    asked for, held or not."""

    def __init__(self) -> None:
        self.lock: asyncio.Lock | None = None
        self.asked = 0

    async def __aenter__(self) -> None:
        self.asked += 1
        self.lock = self.lock or asyncio.Lock()  # made on the app's loop
        await self.lock.acquire()

    async def __aexit__(self, *exc: object) -> None:
        assert self.lock is not None
        self.lock.release()


def test_the_next_prints_photo_is_decoded_once_the_last_ones_result_is_encoded(
    client_factory, photo, monkeypatch
):
    """The second print runs while the first one's picture is encoded, but its photo's
    decode (Pillow's whole image) waits for that encode: the two never hold their memory
    at once (``whole_picture``)."""
    lock, decodes = _CountedLock(), []
    encoding, release = threading.Event(), threading.Event()
    encode, decode = stylize_execution.encode_image, stylize_execution.decode_image

    def held_encode(*args: Any, **keywords: Any) -> tuple[bytes, str]:
        encoding.set()
        release.wait(30)
        return encode(*args, **keywords)

    def counted_decode(*args: Any, **keywords: Any) -> Any:
        decodes.append(1)
        return decode(*args, **keywords)

    monkeypatch.setattr(stylize_execution, "whole_picture", lambda: lock)
    monkeypatch.setattr(stylize_execution, "encode_image", held_encode)
    monkeypatch.setattr(stylize_execution, "decode_image", counted_decode)
    client = client_factory(max_side=2048, bulk_jobs_per_device=1)
    first = _post(client, photo[0], headers=ASYNC).json()
    wait_until(encoding.is_set)  # the first print's decode, then its encode, asked
    second = _post(client, photo[0], headers=ASYNC).json()
    try:
        wait_until(lambda: lock.asked == 3)  # the second print's decode asks
        assert len(decodes) == 1  # and waits
    finally:
        release.set()
    assert [_done(client, job["id"])["state"] for job in (first, second)] == ["succeeded"] * 2
    assert len(decodes) == 2


def test_masks_above_the_base_are_refused(client_factory, photo):
    client = client_factory(max_side=2048)
    files = [
        ("content", ("c.png", photo[0], "image/png")),
        ("style", corpus.png(32, 32)),
        ("mask", corpus.png(32, 32)),
    ]
    response = client.post("/v1/stylize", files=files, data={"size": str(WIDTH)}, headers=ASYNC)
    assert response.status_code == 422
    assert "mask" in response.json()["error"]["message"]


def test_the_job_budget_bounds_jobs(client_factory, photo):
    client = client_factory(max_side=2048, max_job_stylize_pixel_passes=1_000_000)
    response = _post(client, photo[0], headers=ASYNC)
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert "max_job_stylize_pixel_passes" in message and "print-size octaves" in message


def test_a_print_size_request_within_the_sync_budget_is_answered_at_once(client_factory, photo):
    client = client_factory(max_side=2048)  # 1024^2 x 2 x 1.328125 + 1100^2 < 6,500,000
    response = _post(client, photo[0])
    assert response.status_code == 200, response.text
    pixels = np.asarray(Image.open(io.BytesIO(response.content)).convert("RGB"))
    assert np.array_equal(pixels, 255 - photo[1])


# ------------------------------------------------------------------- uploads and formats
def test_stylize_uploads_have_their_own_byte_limit(client_factory):
    client = client_factory(max_side=2048, max_upload_bytes=1024 * 1024)
    client_big = client_factory(max_side=2048, max_stylize_upload_bytes=1024 * 1024)
    padding = bytes(1536 * 1024)  # a part the route ignores: only the body's size counts
    files = [("content", corpus.png(64, 48)), ("style", corpus.png(32, 32))]
    files.append(("padding", ("p.bin", padding, "application/octet-stream")))
    assert client.post("/v1/stylize", files=files).status_code == 200
    refused = client_big.post("/v1/stylize", files=files)
    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize("fmt", ["jpeg", "webp"])
def test_quality_sets_the_lossy_formats_quality(client, fmt):
    files = [("content", corpus.png(96, 64, seed=2)), ("style", corpus.png(32, 32))]
    sizes = {
        quality: len(
            client.post(
                "/v1/stylize",
                files=files,
                data={"format": fmt, "alpha": "0.2", "quality": str(quality)},
            ).content
        )
        for quality in (10, 95)
    }
    assert sizes[10] < sizes[95]
    bad = client.post("/v1/stylize", files=files, data={"format": fmt, "quality": "101"})
    assert bad.status_code == 422 and "quality" in bad.json()["error"]["message"]


def test_a_webp_larger_than_the_format_holds_is_refused_before_work(client_factory, fakes):
    client = client_factory(max_side=20_000, max_stylize_pixel_passes=10**12)
    files = [("content", corpus.png(64, 48)), ("style", corpus.png(32, 32))]
    response = client.post("/v1/stylize", files=files, data={"format": "webp", "size": "16384"})
    assert response.status_code == 422
    assert "16383" in response.json()["error"]["message"]
    assert fakes.adain["cpu"].batch_sizes == []


def test_a_50_megapixel_photo_is_a_job_not_a_synchronous_request(client_factory):
    """A 8660 x 5773 JPEG (50 MP) at size 8192: refused at once with the 422 that says
    how to send it; accepted as a job, painted at 8192 px."""
    client = client_factory(max_side=8192, max_pixels=80_000_000)
    photo = Image.linear_gradient("L").resize((8660, 5773)).convert("RGB")
    buffer = io.BytesIO()
    photo.save(buffer, format="JPEG", quality=90)
    files = [
        ("content", ("big.jpg", buffer.getvalue(), "image/jpeg")),
        ("style", corpus.png(32, 32)),
    ]
    refused = client.post("/v1/stylize", files=files, data={"size": "8192"})
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "send_as_job"
    assert "Prefer: respond-async" in refused.json()["error"]["message"]
    accepted = client.post("/v1/stylize", files=files, data={"size": "8192"}, headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    job = _done(client, accepted.json()["id"])
    assert job["state"] == "succeeded", job
    assert job["progress"]["total"] == 1 + -(-5461 // FAKE_BAND_ROWS)
    with Image.open(io.BytesIO(client.get(job["result_url"]).content)) as result:
        assert result.size == (8192, 5461)

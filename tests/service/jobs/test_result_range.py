"""``GET /v1/jobs/{id}/result`` reads only the asked image's bytes from the store, a
chunk at a time: a big result in the blob store is never read whole, and its 200 and
206 answers are the image's bytes exactly, as they were when the route sliced the whole
result (old results, packed before, read the same)."""

from __future__ import annotations

import base64
import io
import os

import numpy as np
import pytest
from PIL import Image, ImageFile

from service.jobs.blobs import FILE_MIN_BYTES
from service.jobs.blobs.volume import VolumeBlobs
from service.jobs.records import JobRecord, JobResult, new_job_id
from service.keys import ANONYMOUS
from service.routes import jobs as job_routes

pytestmark = pytest.mark.timeout(60)


def _finished(client, images: list[bytes], media_type: str = "image/png") -> str:
    """A succeeded job of the anonymous caller whose result is ``images``."""
    store = client.app.state.store
    record = JobRecord(id=new_job_id(), kind="generate", model="none-served", owner=ANONYMOUS)

    async def write() -> None:
        await store.create(record, b"{}", owner_max_jobs=10)
        await store.finish(
            record.id, "succeeded", result=JobResult(images, media_type, {"seeds": [1]}).packed()
        )

    client.portal.call(write)
    return record.id


def _ranges_read(monkeypatch) -> list[tuple[int, int]]:
    """The ``(start, stop)`` of each range the volume reads from now on; a whole read of
    a blob fails the test."""
    ranges: list[tuple[int, int]] = []
    read_range = VolumeBlobs.read_range

    def counted(self, ref, start, stop):
        ranges.append((start, stop))
        return read_range(self, ref, start, stop)

    def whole(self, ref):
        raise AssertionError("the route read the whole result")

    monkeypatch.setattr(VolumeBlobs, "read_range", counted)
    monkeypatch.setattr(VolumeBlobs, "read", whole)
    return ranges


def test_a_big_result_is_streamed_from_its_blob_never_read_whole(client_factory, monkeypatch):
    monkeypatch.setattr(job_routes, "CHUNK_BYTES", 64 * 1024)  # several chunks an image
    client = client_factory()
    first, second = os.urandom(FILE_MIN_BYTES), os.urandom(300_001)
    job_id = _finished(client, [first, second])
    ranges = _ranges_read(monkeypatch)

    served = client.get(f"/v1/jobs/{job_id}/result?index=1")
    assert served.status_code == 200 and served.content == second
    assert served.headers["content-length"] == str(len(second))
    assert served.headers["content-type"] == "image/png"
    assert served.headers["content-disposition"].endswith(f'{job_id}-1.png"')
    assert max(stop - start for start, stop in ranges) <= 64 * 1024
    assert sum(stop - start for start, stop in ranges[2:]) == len(second)  # after the header

    ranges.clear()
    part = client.get(f"/v1/jobs/{job_id}/result", headers={"Range": "bytes=1000-199999"})
    assert part.status_code == 206 and part.content == first[1000:200_000]
    assert part.headers["content-range"] == f"bytes 1000-199999/{len(first)}"
    assert sum(stop - start for start, stop in ranges[2:]) == 199_000
    tail = client.get(f"/v1/jobs/{job_id}/result?index=1", headers={"Range": "bytes=-7"})
    assert tail.status_code == 206 and tail.content == second[-7:]
    outside = client.get(f"/v1/jobs/{job_id}/result", headers={"Range": f"bytes={len(first)}-"})
    assert outside.status_code == 416
    assert client.get(f"/v1/jobs/{job_id}/result?index=2").status_code == 404


def test_a_big_results_json_reads_its_header_alone(client_factory, monkeypatch):
    """The JSON of a result over ``INLINE_RESULT_MAX_BYTES`` (a print) gives its files'
    sizes from the packed header: the tens of MB are never read for it."""
    monkeypatch.setattr(job_routes, "INLINE_RESULT_MAX_BYTES", FILE_MIN_BYTES)
    client = client_factory()
    images = [os.urandom(FILE_MIN_BYTES), os.urandom(1234)]
    linked, inline = _finished(client, images), _finished(client, images[1:])
    ranges = _ranges_read(monkeypatch)
    body = client.get(f"/v1/jobs/{linked}").json()
    assert body["result"] == {
        "media_type": "image/png",
        "file_bytes": [len(image) for image in images],
        "seeds": [1],
    }
    assert "images" not in body["result"]
    assert sum(stop - start for start, stop in ranges) < 1024  # the header's two reads
    inlined = client.get(f"/v1/jobs/{inline}").json()["result"]  # held by the store
    assert inlined["images"] == [base64.b64encode(images[1]).decode()]
    assert inlined["seeds"] == [1] and "file_bytes" not in inlined


def test_a_thumbnail_reads_its_image_alone(client_factory, monkeypatch):
    """A big result's thumbnail reads the packed header and its one image's bytes: the
    other images, and the result whole, never."""
    client = client_factory()
    noise = np.random.default_rng(0).integers(0, 256, (400, 600, 3), np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).save(buffer, "PNG")
    first, second = buffer.getvalue(), os.urandom(FILE_MIN_BYTES)
    assert len(first) > FILE_MIN_BYTES  # the result is a blob file
    job_id = _finished(client, [second, first])
    ranges = _ranges_read(monkeypatch)
    answer = client.get(f"/v1/jobs/{job_id}/thumbnail", params={"index": 1, "size": 60})
    assert answer.status_code == 200 and answer.headers["content-type"] == "image/jpeg"
    assert Image.open(io.BytesIO(answer.content)).size == (60, 40)
    assert sum(stop - start for start, stop in ranges) < len(first) + 1024  # and the header
    missing = client.get(f"/v1/jobs/{job_id}/thumbnail", params={"index": 2})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "no_thumbnail"


def test_a_big_png_results_thumbnail_is_read_in_bands_with_pillows_pixels(
    client_factory, monkeypatch
):
    """A print's PNG is never decoded whole for its thumbnail (Pillow would hold 4 bytes a
    pixel): Pillow decodes bands of it, and the thumbnail is the one its whole decode
    makes, to the byte."""
    client = client_factory()
    noise = np.random.default_rng(1).integers(0, 256, (400, 600, 3), np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).save(buffer, "PNG")
    with Image.open(io.BytesIO(buffer.getvalue())) as whole:
        whole.thumbnail((60, 60), Image.Resampling.LANCZOS)
        expected = io.BytesIO()
        whole.convert("RGB").save(expected, "JPEG", quality=job_routes.THUMBNAIL_QUALITY)
    job_id = _finished(client, [buffer.getvalue()])
    decoded, load = [], ImageFile.ImageFile.load

    def counted(image: ImageFile.ImageFile):
        decoded.append(image.size)
        return load(image)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counted)
    answer = client.get(f"/v1/jobs/{job_id}/thumbnail", params={"size": 60})
    assert answer.status_code == 200 and answer.content == expected.getvalue()
    assert decoded and max(height for _, height in decoded) < 400 // 4  # bands, not whole


def test_a_small_result_held_by_the_store_answers_the_same_bytes(client_factory):
    client = client_factory()
    images = [b"\x89PNG first image", b"second"]
    job_id = _finished(client, images)
    for index, image in enumerate(images):
        served = client.get(f"/v1/jobs/{job_id}/result?index={index}")
        assert served.status_code == 200 and served.content == image
    part = client.get(f"/v1/jobs/{job_id}/result", headers={"Range": "bytes=4-8"})
    assert part.status_code == 206 and part.content == images[0][4:9]


def test_a_result_whose_blob_went_missing_is_a_clean_answer_not_a_library_error(
    client_factory,
):
    client = client_factory()
    job_id = _finished(client, [os.urandom(FILE_MIN_BYTES)])
    blobs = client.app.state.store.blobs
    for path in list(blobs.root.iterdir()):
        path.unlink()
    for path in (f"/v1/jobs/{job_id}/result", f"/v1/jobs/{job_id}"):  # the file, the JSON
        answer = client.get(path)
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "store_unavailable"

"""The Redis job store keeps big inputs and results in the blob store, a reference in
Redis in their place; counts their real sizes; drops the blobs its jobs no longer name;
and two replicas sharing Redis and one S3-protocol server serve each other's results,
ranges included."""

from __future__ import annotations

import asyncio
import base64
import os
import uuid

import pytest
import redis

from service.jobs.blobs import FILE_MIN_BYTES
from service.jobs.blobs.s3 import S3Blobs
from service.jobs.blobs.volume import VolumeBlobs
from service.jobs.records import JobRecord, JobResult, Packed, new_job_id
from service.jobs.redis_store import RedisJobStore
from service.jobs.redis_store import queue as redis_queue
from service.jobs.redis_store.values import REF_MAX_BYTES
from service.jobs.store import StoreLimits
from service.keys import ANONYMOUS

pytestmark = pytest.mark.timeout(60)


def _record(owner: str = "o", model: str = "dit") -> JobRecord:
    return JobRecord(id=new_job_id(), kind="generate", model=model, owner=owner)


def test_a_big_value_lives_in_the_blob_store_and_redis_holds_a_reference(redis_server, tmp_path):
    prefix = f"blobs-{uuid.uuid4().hex[:8]}:"
    blobs = VolumeBlobs(tmp_path / "blobs")
    payload, result = os.urandom(FILE_MIN_BYTES), os.urandom(3 * FILE_MIN_BYTES)
    record, small = _record(), _record()
    direct = redis.Redis.from_url(redis_server.url)

    async def main() -> None:
        store = RedisJobStore(redis_server.url, StoreLimits(), prefix=prefix, blobs=blobs)
        await store.start()
        try:
            await store.create(record, payload, owner_max_jobs=10)
            assert direct.strlen(f"{prefix}in:{record.id}") < REF_MAX_BYTES
            assert int(direct.get(f"{prefix}inbytes")) == len(payload)  # the blob's size
            assert (await store.get(record.id)).input_bytes == len(payload)
            claim = await store.claim("w", "dit", ("background",), 30.0)
            assert claim is not None and claim.payload == payload
            await store.finish(record.id, "succeeded", result=Packed((result,)))
            assert int(direct.get(f"{prefix}inbytes")) == 0
            assert direct.strlen(f"{prefix}out:{record.id}") < REF_MAX_BYTES
            assert int(direct.get(f"{prefix}outbytes")) == len(result)
            assert (await store.get(record.id)).result_bytes == len(result)
            assert await store.result(record.id) == result
            (name,) = [path.name for path in blobs.root.iterdir()]
            assert name.startswith(f"{record.id}.out.")

            await store.create(small, b"small input", owner_max_jobs=10)  # stays in Redis
            assert direct.get(f"{prefix}in:{small.id}") == b"small input"

            assert await store.delete(record.id)  # the job goes, and its blob
            assert list(blobs.root.iterdir()) == []
        finally:
            await store.close()

    asyncio.run(main())


def test_a_sweep_deletes_the_blobs_no_value_refers_to_and_keeps_the_others(
    redis_server, tmp_path, monkeypatch
):
    prefix = f"keep-{uuid.uuid4().hex[:8]}:"
    blobs = VolumeBlobs(tmp_path / "blobs")
    queued, done = _record(), _record()
    monkeypatch.setattr(redis_queue, "WRITE_GRACE_S", -60.0)

    async def main() -> None:
        store = RedisJobStore(redis_server.url, StoreLimits(), prefix=prefix, blobs=blobs)
        await store.start()
        try:
            await store.create(queued, os.urandom(FILE_MIN_BYTES), owner_max_jobs=10)
            await store.create(done, b"{}", owner_max_jobs=10)
            await store.finish(done.id, "succeeded", result=Packed((os.urandom(FILE_MIN_BYTES),)))
            orphan = blobs.write("gone", "out", [b"no value names it"])
            evicted = _record()  # expired or evicted inside a script: the sweep finds it
            await store.create(evicted, b"{}", owner_max_jobs=10)
            await store.finish(
                evicted.id, "succeeded", result=Packed((os.urandom(FILE_MIN_BYTES),))
            )
            redis.Redis.from_url(redis_server.url).delete(f"{prefix}out:{evicted.id}")
            await store.reap()
            names = sorted(path.name.split(".")[0] for path in blobs.root.iterdir())
            assert names == sorted([queued.id, done.id])  # not gone, nor evicted
            assert orphan.name.split(".")[0] not in names
        finally:
            await store.close()

    asyncio.run(main())


def test_two_replicas_on_one_redis_and_one_s3_serve_each_others_results_by_range(
    client_factory, redis_server, s3_server, s3_credentials
):
    shared = {
        "redis_url": redis_server.url,
        "redis_prefix": f"replicas-{uuid.uuid4().hex[:8]}:",
        "blob_store": "s3",
        "blob_s3_bucket": s3_server.bucket(),
        "blob_s3_prefix": "results/",
        "blob_s3_endpoint_url": s3_server.url,
    }
    writer, reader = client_factory(**shared), client_factory(**shared)
    assert writer.app.state.store is not reader.app.state.store
    image = os.urandom(2 * FILE_MIN_BYTES)
    record = _record(owner=ANONYMOUS, model="none-served")

    async def write() -> None:
        store = writer.app.state.store
        await store.create(record, b"{}", owner_max_jobs=10)
        packed = JobResult([b"first", image], "image/png", {"seeds": [1, 2]}).packed()
        await store.finish(record.id, "succeeded", result=packed)

    writer.portal.call(write)
    listed = s3_server.client().list_objects_v2(Bucket=shared["blob_s3_bucket"])
    (key,) = [item["Key"] for item in listed["Contents"]]
    assert key.startswith(f"results/{record.id}.out.")
    assert isinstance(reader.app.state.store.blobs, S3Blobs)

    url = f"/v1/jobs/{record.id}/result?index=1"
    part = reader.get(url, headers={"Range": "bytes=100000-400000"})
    assert part.status_code == 206 and part.content == image[100_000:400_001]
    assert part.headers["content-range"] == f"bytes 100000-400000/{len(image)}"
    whole = reader.get(url)
    assert whole.status_code == 200 and whole.content == image
    job = reader.get(f"/v1/jobs/{record.id}").json()
    assert job["state"] == "succeeded" and base64.b64decode(job["result"]["images"][1]) == image


def test_a_big_result_is_written_to_the_blob_store_in_its_pieces(
    redis_server, tmp_path, monkeypatch
):
    prefix = f"pieces-{uuid.uuid4().hex[:8]}:"
    blobs = VolumeBlobs(tmp_path / "blobs")
    result = JobResult([os.urandom(FILE_MIN_BYTES), b"second"], "image/png").packed()
    whole, record = result.join(), _record()

    def joined(self: Packed) -> bytes:
        raise AssertionError("a big result was copied whole to be stored")

    async def main() -> None:
        store = RedisJobStore(redis_server.url, StoreLimits(), prefix=prefix, blobs=blobs)
        await store.start()
        try:
            await store.create(record, b"{}", owner_max_jobs=10)
            monkeypatch.setattr(Packed, "join", joined)
            assert await store.finish(record.id, "succeeded", result=result)
            monkeypatch.undo()
            assert (await store.get(record.id)).result_bytes == len(whole)
            assert await store.result(record.id) == whole
        finally:
            await store.close()

    asyncio.run(main())

"""The S3 blob store against a real S3-protocol server (moto's, on a loopback port):
whole and range reads, checksums, deletes, sweeps; the SQLite job store through it; and
the server's errors as the service's own (full: 507 ``StoreFull``; else 503), never
botocore's text."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os

import pytest
from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st

from service.errors import StoreFull, StoreUnavailable
from service.jobs.blobs import FILE_MIN_BYTES, BlobRef
from service.jobs.blobs.configured import open_blobs
from service.jobs.blobs.s3 import PiecesReader, S3Blobs
from service.jobs.records import JobRecord, Packed, new_job_id
from service.jobs.sqlite_store import SqliteJobStore
from service.jobs.store import StoreLimits

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def blobs(s3_server, s3_credentials, tmp_path) -> S3Blobs:
    store = open_blobs(
        "s3", folder=tmp_path, bucket=s3_server.bucket(), prefix="jobs/", endpoint_url=s3_server.url
    )
    assert isinstance(store, S3Blobs)
    return store


def _keys(s3_server, blobs: S3Blobs) -> list[str]:
    listed = s3_server.client().list_objects_v2(Bucket=blobs.bucket)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def test_an_object_is_written_whole_and_read_whole_or_by_range(s3_server, blobs):
    data = os.urandom(100_000)
    ref = blobs.write("job", "out", [data])
    assert ref.size == len(data) and _keys(s3_server, blobs) == [f"jobs/{ref.name}"]
    head = s3_server.client().head_object(Bucket=blobs.bucket, Key=f"jobs/{ref.name}")
    assert head["Metadata"]["sha256"] == ref.checksum
    assert blobs.read(ref) == data
    assert blobs.read_range(ref, 1234, 5678) == data[1234:5678]
    assert blobs.read_range(ref, 99_990, 200_000) == data[99_990:]  # short at the end
    assert blobs.read_range(ref, 100_000, 100_010) == b""  # past the end


def test_a_damaged_or_missing_object_reads_as_missing(s3_server, blobs):
    ref = blobs.write("job", "out", [b"the bytes"])
    s3_server.client().put_object(Bucket=blobs.bucket, Key=f"jobs/{ref.name}", Body=b"other")
    assert blobs.read(ref) is None
    blobs.delete([ref.name])
    assert blobs.read(ref) is None and blobs.read_range(ref, 0, 4) is None
    assert _keys(s3_server, blobs) == []


def test_a_sweep_deletes_old_objects_no_record_names(s3_server, blobs):
    kept, orphan = blobs.write("a", "out", [b"kept"]), blobs.write("b", "out", [b"orphan"])
    assert blobs.sweep({kept.name}, older_than_s=3600.0) == 0  # both young
    assert blobs.sweep({kept.name}, older_than_s=-60.0) == 1
    assert _keys(s3_server, blobs) == [f"jobs/{kept.name}"]
    assert blobs.read(orphan) is None


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        ("QuotaExceeded", 403, StoreFull),
        ("XMinioStorageFull", 507, StoreFull),
        ("InsufficientStorage", 507, StoreFull),
        ("InternalError", 500, StoreUnavailable),
        ("AccessDenied", 403, StoreUnavailable),
    ],
)
def test_the_servers_errors_are_the_services_own(code, status, error):
    import boto3

    client = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    blobs = S3Blobs("bucket", client=client)
    with Stubber(client) as stub:
        stub.add_client_error(
            "put_object",
            service_error_code=code,
            service_message="botocore's words",
            http_status_code=status,
        )
        with pytest.raises(StoreUnavailable) as raised:
            blobs.write("job", "out", [b"data"])
    assert type(raised.value) is error
    assert "botocore" not in raised.value.message and code not in raised.value.message


def test_an_unreachable_server_is_store_unavailable(s3_credentials):
    from s3_server import _free_port

    blobs = S3Blobs("bucket", endpoint_url=f"http://127.0.0.1:{_free_port()}")
    with pytest.raises(StoreUnavailable) as raised:
        blobs.read(BlobRef("job.out.x", "0"))
    assert type(raised.value) is StoreUnavailable
    assert "127.0.0.1" not in raised.value.message


def test_the_sqlite_store_keeps_its_big_blobs_in_the_bucket(s3_server, blobs, tmp_path):
    payload, result = os.urandom(FILE_MIN_BYTES), os.urandom(FILE_MIN_BYTES + 1)
    record = JobRecord(id=new_job_id(), kind="generate", model="dit", owner="o")

    async def main() -> None:
        store = SqliteJobStore(tmp_path / "jobs.db", StoreLimits(), blobs=blobs)
        await store.start()
        try:
            await store.create(record, payload, owner_max_jobs=10)
            claim = await store.claim("w", "dit", ("background",), 30.0)
            assert claim is not None and claim.payload == payload
            await store.finish(record.id, "succeeded", result=Packed((result,)))
            assert await store.result(record.id) == result
            (key,) = _keys(s3_server, blobs)
            assert key.startswith(f"jobs/{record.id}.out.")
            assert not (tmp_path / "jobs-files").exists()
            assert await store.delete(record.id)
            assert _keys(s3_server, blobs) == []
        finally:
            await store.close()

    asyncio.run(main())


def test_an_object_is_written_from_its_pieces(s3_server, blobs):
    pieces = [os.urandom(70_000), b"", os.urandom(3), os.urandom(200_000)]
    whole = b"".join(pieces)
    ref = blobs.write("job", "out", pieces)
    assert ref.size == len(whole) and ref.checksum == hashlib.sha256(whole).hexdigest()
    head = s3_server.client().head_object(Bucket=blobs.bucket, Key=f"jobs/{ref.name}")
    assert head["Metadata"]["sha256"] == ref.checksum
    assert blobs.read(ref) == whole


@settings(max_examples=80, deadline=None)
@given(
    pieces=st.lists(st.binary(max_size=40), max_size=6),
    steps=st.lists(
        st.tuples(st.sampled_from(["read", "seek"]), st.integers(-3, 300), st.integers(0, 2)),
        max_size=12,
    ),
)
def test_the_pieces_reader_reads_and_seeks_as_a_file_of_their_concatenation(pieces, steps):
    reader, file = PiecesReader(pieces), io.BytesIO(b"".join(pieces))
    for action, number, whence in steps:
        if action == "read":
            assert reader.read(max(number, -1)) == file.read(max(number, -1))
        else:
            offset = number if whence == io.SEEK_SET else number - 150
            base = {io.SEEK_SET: 0, io.SEEK_CUR: file.tell(), io.SEEK_END: len(file.getvalue())}
            if base[whence] + offset < 0:  # a file refuses it (BytesIO would go to 0)
                with pytest.raises(ValueError):
                    reader.seek(offset, whence)
                continue
            assert reader.seek(offset, whence) == file.seek(offset, whence)
        assert reader.tell() == file.tell()
    assert reader.read() == file.read()

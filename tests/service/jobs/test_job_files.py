"""Big job inputs and results as files beside the SQLite job database: written whole,
checked by their checksum, deleted with their job, swept when orphaned; and a store made
before files existed opens with every job it held."""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import time

import pytest

from service.errors import StoreFull, StoreUnavailable
from service.jobs.blobs import FILE_MIN_BYTES
from service.jobs.blobs.volume import VolumeBlobs
from service.jobs.records import JobRecord, JobResult, Packed, new_job_id
from service.jobs.sqlite_store import SqliteJobStore
from service.jobs.sqlite_store.connection import COLUMNS, SCHEMA, db_value
from service.jobs.store import StoreLimits

BIG = FILE_MIN_BYTES + 12_345


def _record(**fields) -> JobRecord:
    return JobRecord(id=new_job_id(), kind="generate", model="dit", owner="o", **fields)


def _files(store: SqliteJobStore) -> list[str]:
    return sorted(p.name for p in store.blobs.root.iterdir()) if store.blobs.root.is_dir() else []


def _run(scenario, tmp_path, **limits):
    async def main() -> None:
        store = SqliteJobStore(tmp_path / "jobs.db", StoreLimits(**limits))
        await store.start()
        try:
            await scenario(store)
        finally:
            await store.close()

    asyncio.run(main())


def test_a_big_input_and_result_live_in_files_and_go_with_their_job(tmp_path):
    async def scenario(store: SqliteJobStore) -> None:
        payload, result = os.urandom(BIG), os.urandom(2 * BIG)
        record = _record()
        await store.create(record, payload, owner_max_jobs=10)
        assert [name.split(".")[1] for name in _files(store)] == ["in"]
        claim = await store.claim("w", "dit", ("background",), 30.0)
        assert claim is not None and claim.payload == payload
        await store.finish(record.id, "succeeded", result=Packed((result,)))
        assert [name.split(".")[1] for name in _files(store)] == ["out"]  # the input went
        assert await store.result(record.id) == result
        assert store.path.stat().st_size < BIG  # the database holds neither
        assert await store.delete(record.id)
        assert _files(store) == []

    _run(scenario, tmp_path)


def test_a_small_result_stays_in_the_database(tmp_path):
    async def scenario(store: SqliteJobStore) -> None:
        record = _record()
        await store.create(record, b"{}", owner_max_jobs=10)
        await store.finish(record.id, "succeeded", result=Packed((b"small",)))
        assert _files(store) == []
        assert await store.result(record.id) == b"small"

    _run(scenario, tmp_path)


def test_a_damaged_file_reads_as_no_result_never_as_other_bytes(tmp_path):
    async def scenario(store: SqliteJobStore) -> None:
        record = _record()
        await store.create(record, b"{}", owner_max_jobs=10)
        await store.finish(record.id, "succeeded", result=Packed((os.urandom(BIG),)))
        (only,) = _files(store)
        path = store.blobs.root / only
        data = bytearray(path.read_bytes())
        data[100] ^= 0xFF
        path.write_bytes(bytes(data))
        assert await store.result(record.id) is None

    _run(scenario, tmp_path)


def test_a_second_finish_of_the_same_job_leaves_the_first_result_and_no_file(tmp_path):
    async def scenario(store: SqliteJobStore) -> None:
        record = _record()
        await store.create(record, b"{}", owner_max_jobs=10)
        first, second = os.urandom(BIG), os.urandom(BIG)
        assert await store.finish(record.id, "succeeded", result=Packed((first,)))
        assert not await store.finish(record.id, "succeeded", result=Packed((second,)))
        assert len(_files(store)) == 1
        assert await store.result(record.id) == first

    _run(scenario, tmp_path)


def test_files_no_row_names_are_swept_at_start_once_old(tmp_path):
    files = VolumeBlobs(tmp_path / "jobs-files")
    old = files.write("gone", "out", [b"x"])
    fresh = files.write("writing", "out", [b"y"])
    an_hour_ago = time.time() - 7200
    os.utime(files.root / old.name, (an_hour_ago, an_hour_ago))

    async def scenario(store: SqliteJobStore) -> None:
        assert _files(store) == [fresh.name]  # another process may be about to commit it

    _run(scenario, tmp_path)


def test_a_full_volume_is_store_full_and_leaves_nothing(tmp_path, monkeypatch):
    files = VolumeBlobs(tmp_path / "files")

    def no_room(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_room)
    with pytest.raises(StoreFull) as full:
        files.write("job", "out", [b"data"])
    assert "disk is full" in full.value.message and "No space" not in full.value.message
    assert list(files.root.iterdir()) == []


# ------------------------------------------------------------------- migration
_OLD_BLOBS = """CREATE TABLE IF NOT EXISTS blobs (
    id TEXT NOT NULL, kind TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (id, kind)
);"""


def _old_store(path, jobs: list[tuple[JobRecord, bytes | None, bytes | None, float | None]]):
    """A database as the store wrote it before files: the old ``blobs`` table (no file
    columns, no auto_vacuum), each job's row as the old create and finish wrote it, its
    input while unfinished, its result once succeeded."""
    start = SCHEMA.index("CREATE TABLE IF NOT EXISTS blobs")
    end = SCHEMA.index(");", start) + 2
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(SCHEMA[:start] + _OLD_BLOBS + SCHEMA[end:])
    for seq, (record, payload, result, lease_until) in enumerate(jobs, 1):
        values = {name: db_value(getattr(record, name)) for name in COLUMNS}
        values |= {"seq": seq, "lease_until": lease_until}
        db.execute(
            f"INSERT INTO jobs ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
            tuple(values.values()),
        )
        if payload is not None:
            db.execute("INSERT INTO blobs VALUES (?, 'in', ?)", (record.id, payload))
        if result is not None:
            db.execute("INSERT INTO blobs VALUES (?, 'out', ?)", (record.id, result))
    db.close()


def test_a_store_made_before_files_opens_with_every_job_in_every_state(tmp_path):
    now = time.time()
    error = {"code": "internal_error", "message": "m"}
    queued, queued_input = _record(input_bytes=BIG), os.urandom(BIG)
    running = _record(state="running", worker="w0", attempts=1, started_at=now)
    succeeded = _record(state="succeeded", finished_at=now, result_bytes=BIG, attempts=1)
    failed = _record(state="failed", finished_at=now, error=error, attempts=1)
    cancelled = _record(state="cancelled", finished_at=now, error=error)
    result = os.urandom(BIG)
    _old_store(
        tmp_path / "jobs.db",
        [
            (queued, queued_input, None, None),
            (running, b'{"running": 1}', None, now + 600),
            (succeeded, None, result, None),
            (failed, None, None, None),
            (cancelled, None, None, None),
        ],
    )

    async def scenario(store: SqliteJobStore) -> None:
        for record in (queued, running, succeeded, failed, cancelled):
            stored = await store.get(record.id)
            assert stored is not None and stored.state == record.state
        assert (await store.get(failed.id)).error == error
        assert await store.result(succeeded.id) == result
        claim = await store.claim("w1", "dit", ("background",), 30.0)
        assert claim is not None and claim.record.id == queued.id
        assert claim.payload == queued_input
        new = _record()
        await store.create(new, os.urandom(BIG), owner_max_jobs=10)  # new blobs: files
        assert len(_files(store)) == 1
        assert await store.finish(running.id, "succeeded", result=Packed((b"done",)))
        assert await store.result(running.id) == b"done"

    _run(scenario, tmp_path)
    db = sqlite3.connect(tmp_path / "jobs.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2


# ------------------------------------------------------------------- the volume
def test_the_volume_reads_a_range_without_the_rest_and_a_whole_blob_by_its_checksum(tmp_path):
    files = VolumeBlobs(tmp_path / "files")
    data = os.urandom(5000)
    ref = files.write("job", "out", [data])
    assert ref.size == 5000 and ref.name.startswith("job.out.")
    assert files.read_range(ref, 1000, 1100) == data[1000:1100]
    assert files.read_range(ref, 4990, 6000) == data[4990:]  # short at the end
    assert files.read(ref) == data
    assert [p.name for p in files.root.iterdir()] == [ref.name]  # no temporary left
    files.delete([ref.name])
    assert files.read(ref) is None and files.read_range(ref, 0, 10) is None


def test_a_write_cut_short_leaves_no_blob_under_its_name(tmp_path, monkeypatch):
    files = VolumeBlobs(tmp_path / "files")

    def broken_rename(source, target) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "replace", broken_rename)
    with pytest.raises(StoreUnavailable) as failed:
        files.write("job", "out", [b"data"])
    assert not isinstance(failed.value, StoreFull) and "I/O" not in failed.value.message
    assert list(files.root.iterdir()) == []


def test_a_blob_that_cannot_be_deleted_now_leaves_the_jobs_change_done(tmp_path):
    """Deleting a blob is no part of the job's transaction: a blob store that fails it
    (a bucket away) neither fails the change nor stalls the database; a sweep gets it."""

    class Undeletable(VolumeBlobs):
        def delete(self, names: list[str]) -> None:
            raise StoreUnavailable("the job objects cannot be deleted right now")

    async def main() -> None:
        blobs = Undeletable(tmp_path / "files")
        store = SqliteJobStore(tmp_path / "jobs.db", StoreLimits(), blobs=blobs)
        await store.start()
        try:
            record = _record()
            await store.create(record, b"{}", owner_max_jobs=10)
            await store.finish(record.id, "succeeded", result=Packed((os.urandom(BIG),)))
            assert await store.delete(record.id)
            assert await store.get(record.id) is None
            assert len(list(blobs.root.iterdir())) == 1  # left for the sweep
        finally:
            await store.close()

    asyncio.run(main())


def test_a_big_result_is_written_in_its_pieces_never_joined(tmp_path, monkeypatch):
    image, second = os.urandom(BIG), os.urandom(1000)
    result = JobResult([image, second], "image/png", {"seeds": [7]}).packed()
    assert result.pieces[1] is image and result.pieces[2] is second  # the images, not copies
    whole = result.join()

    def joined(self: Packed) -> bytes:
        raise AssertionError("a big result was copied whole to be stored")

    async def scenario(store: SqliteJobStore) -> None:
        record = _record()
        await store.create(record, b"{}", owner_max_jobs=10)
        monkeypatch.setattr(Packed, "join", joined)
        assert await store.finish(record.id, "succeeded", result=result)
        monkeypatch.undo()
        assert (await store.get(record.id)).result_bytes == len(whole)
        assert await store.result(record.id) == whole  # checked against its checksum
        (name,) = _files(store)
        assert (store.blobs.root / name).read_bytes() == whole

    _run(scenario, tmp_path)

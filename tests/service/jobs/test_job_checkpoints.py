"""Job checkpoints (``JobStore.put_checkpoint`` / ``checkpoint``) on both backends: SQLite
and a real Redis (the session's ``redis_server``, a fresh key prefix per test).

Only the lease holder of a running job writes them; they outlive a lost lease (the next
worker resumes from them) and are forgotten when the job ends, is deleted or expires.
Leases and lifetimes are short and the tests wait past them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Awaitable, Callable

import pytest
from redis_server import RedisServer

from service.errors import StoreUnavailable
from service.jobs.breaker import BULK_BYTES_PER_S
from service.jobs.records import (
    CANCELLED,
    FAILED,
    QUEUED,
    SUCCEEDED,
    JobRecord,
    Packed,
    new_job_id,
)
from service.jobs.redis_store import RedisJobStore
from service.jobs.sqlite_store import SqliteJobStore
from service.jobs.store import JobStore, StoreLimits
from service.priorities import BACKGROUND, INTERACTIVE

pytestmark = pytest.mark.timeout(60)
LEASE = 0.3
PRIORITIES = (INTERACTIVE, BACKGROUND)


@pytest.fixture(params=["sqlite", "redis"])
def open_store(request, tmp_path):
    """``open_store(limits)`` -> a started store (as in ``jobs/test_job_store.py``); the
    stores of one test share their backing data (the file, or the Redis prefix)."""
    prefix = f"ckpt-{uuid.uuid4().hex[:8]}:"
    redis_url = request.getfixturevalue("redis_server").url if request.param == "redis" else ""
    opened: list[JobStore] = []

    async def open_(limits: StoreLimits | None = None, **kw) -> JobStore:
        limits = limits or StoreLimits()
        if request.param == "sqlite":
            store: JobStore = SqliteJobStore(tmp_path / "jobs.db", limits, poll_s=0.05, **kw)
        else:
            store = RedisJobStore(redis_url, limits, prefix=prefix, **kw)
        await store.start()
        opened.append(store)
        return store

    open_.backend = request.param
    open_.opened = opened
    return open_


def run(open_store, scenario: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        try:
            await scenario()
        finally:
            for store in open_store.opened:
                await store.close()
            open_store.opened.clear()

    asyncio.run(main())


def _job() -> JobRecord:
    return JobRecord(
        id=new_job_id(),
        kind="stylize-video",
        model="adain",
        owner="alice",
        priority=BACKGROUND,
        parts=1,
        unit="chunk",
        parameters={},
    )


async def _claimed(store: JobStore, worker: str = "w1") -> JobRecord:
    """A new job, claimed by ``worker``."""
    job, _ = await store.create(_job(), b"input", owner_max_jobs=100)
    claim = await store.claim(worker, job.model, PRIORITIES, LEASE)
    assert claim is not None and claim.record.id == job.id
    return claim.record


async def _checkpointed(store: JobStore, data: bytes = b"piece") -> JobRecord:
    """A job claimed by ``w1`` that saved ``data`` as its checkpoint ``chunk-0``."""
    job = await _claimed(store)
    assert await store.put_checkpoint(job.id, "w1", "chunk-0", data)
    return job


def run_checkpointed(
    open_store,
    scenario: Callable[[JobStore, JobRecord], Awaitable[None]],
    *,
    limits: StoreLimits | None = None,
    data: bytes = b"piece",
) -> None:
    """:func:`run` ``scenario`` on a store opened with ``limits`` and its
    :func:`_checkpointed` job."""

    async def checkpointed() -> None:
        store = await open_store(limits)
        await scenario(store, await _checkpointed(store, data))

    run(open_store, checkpointed)


def test_only_the_lease_holder_writes_and_every_name_reads_back_exactly(open_store):
    async def scenario() -> None:
        store = await open_store()
        queued, _ = await store.create(_job(), b"input", owner_max_jobs=100)
        assert not await store.put_checkpoint(queued.id, "w1", "chunk-0", b"x")  # not claimed
        assert await store.checkpoint(queued.id, "chunk-0") is None
        claim = await store.claim("w1", queued.model, PRIORITIES, LEASE)
        assert claim is not None
        job = claim.record
        assert job.id == queued.id
        first, second = bytes(range(256)) * 4, b"\x00\xff second \x00"
        assert await store.put_checkpoint(job.id, "w1", "chunk-0", first)
        assert await store.put_checkpoint(job.id, "w1", "chunk-1", second)
        assert await store.checkpoint(job.id, "chunk-0") == first
        assert await store.checkpoint(job.id, "chunk-1") == second
        assert await store.put_checkpoint(job.id, "w1", "chunk-1", b"replaced")
        assert await store.checkpoint(job.id, "chunk-1") == b"replaced"
        assert not await store.put_checkpoint(job.id, "w2", "chunk-1", b"not theirs")
        assert not await store.put_checkpoint(job.id, "w2", "chunk-2", b"not theirs")
        assert await store.checkpoint(job.id, "chunk-1") == b"replaced"
        assert await store.checkpoint(job.id, "chunk-2") is None
        assert await store.checkpoint(job.id, "missing") is None
        assert await store.checkpoint("no-such-job", "chunk-0") is None
        assert not await store.put_checkpoint("no-such-job", "w1", "chunk-0", b"x")
        other = await open_store()  # another process (replica) on the same store reads them
        assert await other.checkpoint(job.id, "chunk-0") == first

    run(open_store, scenario)


@pytest.mark.parametrize("state", [SUCCEEDED, FAILED, CANCELLED])
def test_a_final_job_forgets_its_checkpoints_and_takes_no_more(open_store, state):
    async def scenario(store: JobStore, job: JobRecord) -> None:
        result = Packed((b"result",)) if state == SUCCEEDED else None
        error = None if state == SUCCEEDED else {"code": "x", "message": "y"}
        assert await store.finish(job.id, state, result=result, error=error)
        assert await store.checkpoint(job.id, "chunk-0") is None
        assert not await store.put_checkpoint(job.id, "w1", "chunk-0", b"late")
        assert await store.checkpoint(job.id, "chunk-0") is None

    run_checkpointed(open_store, scenario)


def test_a_deleted_job_forgets_its_checkpoints(open_store):
    async def scenario(store: JobStore, job: JobRecord) -> None:
        assert not await store.delete(job.id)  # unfinished: kept, with its checkpoints
        assert await store.checkpoint(job.id, "chunk-0") == b"piece"
        assert await store.finish(job.id, SUCCEEDED, result=Packed((b"done",)))
        assert await store.delete(job.id)
        assert await store.checkpoint(job.id, "chunk-0") is None

    run_checkpointed(open_store, scenario)


def test_a_lost_lease_keeps_the_checkpoints_for_the_next_worker(open_store):
    async def scenario(store: JobStore, job: JobRecord) -> None:
        await asyncio.sleep(LEASE + 0.2)  # w1 died
        assert await store.reap() == 1
        assert (await store.get(job.id)).state == QUEUED
        assert await store.checkpoint(job.id, "chunk-0") == b"first piece"
        assert not await store.put_checkpoint(job.id, "w1", "chunk-1", b"w1 is gone")
        again = await store.claim("w2", job.model, PRIORITIES, LEASE)
        assert again is not None and again.record.id == job.id and again.record.attempts == 2
        assert await store.checkpoint(job.id, "chunk-0") == b"first piece"  # w2 resumes
        assert await store.put_checkpoint(job.id, "w2", "chunk-1", b"second piece")
        assert not await store.put_checkpoint(job.id, "w1", "chunk-1", b"w1 is gone")
        assert await store.checkpoint(job.id, "chunk-1") == b"second piece"
        assert await store.finish(job.id, SUCCEEDED, result=Packed((b"done",)))
        assert await store.checkpoint(job.id, "chunk-0") is None
        assert await store.checkpoint(job.id, "chunk-1") is None

    run_checkpointed(open_store, scenario, data=b"first piece")


def test_a_requeued_job_cancelled_in_the_queue_forgets_its_checkpoints(open_store):
    async def scenario(store: JobStore, job: JobRecord) -> None:
        await store.release("w1", [job.id])  # a draining worker hands it back
        assert await store.checkpoint(job.id, "chunk-0") == b"piece"
        assert (await store.cancel(job.id)).state == CANCELLED
        assert await store.checkpoint(job.id, "chunk-0") is None

    run_checkpointed(open_store, scenario)


def test_a_job_out_of_attempts_or_expired_has_no_checkpoints(open_store):
    async def scenario(store: JobStore, job: JobRecord) -> None:
        await asyncio.sleep(LEASE + 0.2)
        assert await store.reap() == 0  # its last attempt: failed, not requeued
        assert (await store.get(job.id)).state == FAILED
        assert await store.checkpoint(job.id, "chunk-0") is None
        await asyncio.sleep(0.4)  # past ttl_s
        await store.reap()
        assert await store.get(job.id) is None
        assert await store.checkpoint(job.id, "chunk-0") is None

    run_checkpointed(open_store, scenario, limits=StoreLimits(ttl_s=0.3, max_attempts=1))


def test_redis_checkpoints_expire_should_they_be_orphaned(redis_server):
    """A safety net only (a job's end deletes them): the hash expires ``ttl_s`` after the
    last put. SQLite needs none: the rows go in the same transaction as the job's row."""

    async def scenario() -> None:
        store = RedisJobStore(
            redis_server.url, StoreLimits(ttl_s=0.3), prefix=f"ckpt-{uuid.uuid4().hex[:8]}:"
        )
        await store.start()
        try:
            job = await _checkpointed(store)
            key = store._key("ckpt", job.id)
            assert 0 < await store._redis.pttl(key) <= 300
            await asyncio.sleep(0.5)  # no put for ttl_s: the safety net dropped it
            assert await store._redis.exists(key) == 0
            assert await store.checkpoint(job.id, "chunk-0") is None
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_5_mb_checkpoint_round_trips_outside_the_byte_limits(open_store):
    async def scenario() -> None:
        limits = StoreLimits(inputs_max_bytes=1024 * 1024, results_max_bytes=1024 * 1024)
        store = await open_store(limits)
        job = await _claimed(store)
        data = os.urandom(5 * 1024 * 1024)
        assert await store.put_checkpoint(job.id, "w1", "chunk-0", data)
        back = await store.checkpoint(job.id, "chunk-0")
        assert back is not None and len(back) == len(data) and back == data
        _, created = await store.create(_job(), b"input", owner_max_jobs=100)
        assert created  # the checkpoint took none of the queued inputs' budget

    run(open_store, scenario)


def test_an_older_database_without_the_table_opens_and_takes_checkpoints(tmp_path):
    async def scenario() -> None:
        store = SqliteJobStore(tmp_path / "jobs.db", StoreLimits())
        await store.start()
        await store.close()
        with sqlite3.connect(tmp_path / "jobs.db") as db:  # as an older version left it
            db.execute("DROP TABLE checkpoints")
        store = SqliteJobStore(tmp_path / "jobs.db", StoreLimits())
        await store.start()
        try:
            job = await _checkpointed(store)
            assert await store.checkpoint(job.id, "chunk-0") == b"piece"
        finally:
            await store.close()

    asyncio.run(scenario())


# --------------------------------------------------------------------- a stalled store
CALL_TIMEOUT = 0.3


@pytest.fixture(params=["sqlite", "redis"])
def stalled_store(request, tmp_path):
    """``(open, stall, resume)``: a store on its own backing data, and how to stall it
    (SIGSTOP of its own redis-server; the SQLite store's database thread held, as by a
    disk that hangs) and let it go."""
    server: RedisServer | None = None
    held = threading.Event()
    if request.param == "redis":
        server = request.getfixturevalue("own_redis")
    stores: list[JobStore] = []

    async def open_() -> JobStore:
        kw = {"call_timeout_s": CALL_TIMEOUT, "probe_interval_s": 0.05}
        if server is not None:
            store: JobStore = RedisJobStore(server.url, StoreLimits(), prefix="stall:", **kw)
        else:
            store = SqliteJobStore(tmp_path / "jobs.db", StoreLimits(), **kw)
        await store.start()
        stores.append(store)
        return store

    def stall() -> None:
        if server is not None:
            os.kill(server.process.pid, signal.SIGSTOP)
        else:
            held.clear()
            stores[0]._executor.submit(held.wait)

    def resume() -> None:
        if server is not None:
            os.kill(server.process.pid, signal.SIGCONT)
        held.set()

    yield open_, stall, resume
    resume()


async def _timed(work: Awaitable[object]) -> float:
    start = time.monotonic()
    with pytest.raises(StoreUnavailable):
        await work
    return time.monotonic() - start


def test_a_stalled_store_fails_checkpoint_calls_fast(stalled_store):
    open_, stall, resume = stalled_store

    async def scenario() -> None:
        store = await open_()
        try:
            job = await _checkpointed(store)
            stall()
            data = b"p" * (1024 * 1024)
            budget = CALL_TIMEOUT + len(data) / BULK_BYTES_PER_S + 1.0
            assert await _timed(store.put_checkpoint(job.id, "w1", "chunk-1", data)) < budget
            assert store.breaker.is_open
            assert await _timed(store.checkpoint(job.id, "chunk-0")) < 0.2  # at once
            assert await _timed(store.put_checkpoint(job.id, "w1", "chunk-1", data)) < 0.2
            resume()
            deadline = time.monotonic() + 10
            while store.breaker.is_open:
                assert time.monotonic() < deadline, "the breaker never closed"
                await asyncio.sleep(0.05)
            assert await store.checkpoint(job.id, "chunk-0") == b"piece"
        finally:
            resume()
            await store.close()

    asyncio.run(scenario())

"""A big input or result is written to the blob store before the job store's call that
names it. When that call's outcome is unknown (no answer within its budget, or its
caller cancelled) the database's thread or the Redis server may still commit it: the
blob then stays, so a job committed with it keeps its bytes, and a sweep takes it if
nothing was committed. A call refused for sure deletes it at once."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from service.errors import StoreFull, StoreUnavailable
from service.jobs.blobs import FILE_MIN_BYTES
from service.jobs.blobs.volume import VolumeBlobs
from service.jobs.records import JobRecord, Packed, new_job_id
from service.jobs.redis_store import RedisJobStore
from service.jobs.roles import JobQueue
from service.jobs.sqlite_store import SqliteJobStore
from service.jobs.store import StoreLimits

pytestmark = pytest.mark.timeout(60)

BIG = FILE_MIN_BYTES + 4321


def _record() -> JobRecord:
    return JobRecord(id=new_job_id(), kind="generate", model="dit", owner="o")


def _stores(backend: str, tmp_path, request) -> tuple[JobQueue, VolumeBlobs]:
    if backend == "sqlite":
        store = SqliteJobStore(tmp_path / "jobs.db", StoreLimits())
        return store, store.blobs
    server = request.getfixturevalue("redis_server")
    blobs = VolumeBlobs(tmp_path / "blobs")
    prefix = f"commits-{uuid.uuid4().hex[:8]}:"
    return RedisJobStore(server.url, StoreLimits(), prefix=prefix, blobs=blobs), blobs


def _answer_lost(store: JobQueue, monkeypatch, error: BaseException) -> None:
    """The store's next call to its database runs to its commit, and then its answer is
    lost with ``error`` (every later call is as before)."""
    name = "_run" if isinstance(store, SqliteJobStore) else "_script"
    real: Callable[..., Awaitable[Any]] = getattr(store, name)

    async def committed_then_lost(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(store, name, real)
        await real(*args, **kwargs)
        raise error

    monkeypatch.setattr(store, name, committed_then_lost)


LOST_ANSWERS = {
    "no answer in time": StoreUnavailable("no answer within 1 s"),
    "cancelled": asyncio.CancelledError(),
}


@pytest.mark.parametrize("lost", LOST_ANSWERS, ids=list(LOST_ANSWERS))
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_commit_whose_answer_was_lost_keeps_its_blob(
    backend, lost, tmp_path, monkeypatch, request
):
    store, blobs = _stores(backend, tmp_path, request)
    payload, result = os.urandom(BIG), os.urandom(2 * BIG)
    record = _record()

    async def main() -> None:
        await store.start()
        try:
            _answer_lost(store, monkeypatch, LOST_ANSWERS[lost])
            with pytest.raises(type(LOST_ANSWERS[lost])):
                await store.create(record, payload, owner_max_jobs=10)
            claim = await store.claim("w", "dit", ("background",), 30.0)
            assert claim is not None and claim.payload == payload  # the accepted job's input

            _answer_lost(store, monkeypatch, LOST_ANSWERS[lost])
            with pytest.raises(type(LOST_ANSWERS[lost])):
                await store.finish(record.id, "succeeded", result=Packed((result,)))
            # the worker writes its outcome again (the runner retries): the first stands
            assert not await store.finish(record.id, "succeeded", result=Packed((os.urandom(BIG),)))
            assert (await store.get(record.id)).state == "succeeded"
            assert await store.result(record.id) == result
            # the retry's blob went (on Redis the input's, which the lost call was to
            # delete after its script, is left to the reaper's sweep)
            assert len([path for path in blobs.root.iterdir() if ".out." in path.name]) == 1
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_call_refused_for_sure_deletes_its_blob_at_once(backend, tmp_path, monkeypatch, request):
    store, blobs = _stores(backend, tmp_path, request)
    record = _record()

    async def main() -> None:
        await store.start()
        try:
            name = "_run" if isinstance(store, SqliteJobStore) else "_script"

            async def full(*args: Any, **kwargs: Any) -> Any:
                raise StoreFull("no room")

            monkeypatch.setattr(store, name, full)
            with pytest.raises(StoreFull):
                await store.create(record, os.urandom(BIG), owner_max_jobs=10)
            assert list(blobs.root.iterdir()) == []
        finally:
            monkeypatch.undo()
            await store.close()

    asyncio.run(main())


def test_a_finish_cancelled_while_its_transaction_commits_keeps_the_result(tmp_path):
    """The race itself, on SQLite: the finish's caller is cancelled while the database's
    thread is inside the transaction; the thread commits the job succeeded."""
    store = SqliteJobStore(tmp_path / "jobs.db", StoreLimits())
    record, result = _record(), os.urandom(2 * BIG)
    inside, go_on = threading.Event(), threading.Event()
    real_finish_tx = store._finish_tx

    def held_finish_tx(*args: Any) -> bool:
        inside.set()
        assert go_on.wait(30)
        return real_finish_tx(*args)

    async def main() -> None:
        await store.start()
        try:
            await store.create(record, b"{}", owner_max_jobs=10)
            assert await store.claim("w", "dit", ("background",), 30.0) is not None
            store._finish_tx = held_finish_tx  # type: ignore[method-assign]
            finishing = asyncio.create_task(
                store.finish(record.id, "succeeded", result=Packed((result,)))
            )
            await asyncio.to_thread(inside.wait, 30)
            finishing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await finishing
            go_on.set()
            store._finish_tx = real_finish_tx  # type: ignore[method-assign]
            assert await store.get(record.id) is not None  # queued behind the commit
            assert (await store.get(record.id)).state == "succeeded"
            assert await store.result(record.id) == result
        finally:
            go_on.set()
            await store.close()

    asyncio.run(main())

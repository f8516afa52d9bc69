"""A full disk under the SQLite job store (made by construction: ``PRAGMA max_page_count``
caps the file the store may grow to), and a Redis over its ``maxmemory``: submits answer 507 ``store_full`` with the real
reason, a result that does not fit fails its job once with ``storage_full`` (never
recomputed), the breaker stays closed, and space comes back as jobs expire."""

from __future__ import annotations

import asyncio
import io
import sqlite3
import threading

import numpy as np
import pytest
import redis
from PIL import Image
from service_fakes import wait_until

from service.jobs.blobs import FILE_MIN_BYTES
from service.jobs.records import JobRecord, Packed, new_job_id
from service.jobs.sqlite_store import SqliteJobStore
from service.jobs.sqlite_store.connection import SCHEMA
from service.jobs.store import StoreLimits

pytestmark = pytest.mark.timeout(120)

ASYNC = {"Prefer": "respond-async"}


def fill(store: SqliteJobStore, spare_pages: int = 0) -> None:
    """Fill the store's file up to a cap a little above its size, then free
    ``spare_pages`` of it: a write needing more than those pages fails as on a full
    volume."""

    def on_thread() -> None:
        db = store._db
        db.execute("CREATE TABLE IF NOT EXISTS filler (data BLOB)")
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages + 64}")
        while True:
            try:
                db.execute("INSERT INTO filler VALUES (zeroblob(1000))")
            except sqlite3.OperationalError as exc:
                assert "full" in str(exc)
                break
        db.execute(
            "DELETE FROM filler WHERE rowid IN (SELECT rowid FROM filler LIMIT ?)",
            (4 * spare_pages,),
        )

    store._executor.submit(on_thread).result()


def _noise_png(side: int) -> bytes:
    """A photo that PNG cannot compress: about ``3 * side**2`` bytes."""
    pixels = np.random.default_rng(side).integers(0, 256, (side, side, 3), np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _full_redis(redis_server, room: int = -1) -> None:
    """Redis's ``maxmemory`` set ``room`` bytes above what it uses now (-1: over it)."""
    client = redis.Redis.from_url(redis_server.url)
    used = client.info("memory")["used_memory"]
    client.config_set("maxmemory", used + room)
    client.close()


def _client(client_factory, backend: str, request):
    if backend == "redis":
        server = request.getfixturevalue("own_redis")
        return client_factory(redis_url=server.url, redis_prefix="full:"), server
    return client_factory(), None


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_submit_on_a_full_disk_is_507_store_full_with_the_reason(
    client_factory, backend, request
):
    """A 48 KB upload on a disk with no page to spare (Redis: over its maxmemory)."""
    client, server = _client(client_factory, backend, request)
    store = client.app.state.store
    if server is None:
        fill(store)
    else:
        _full_redis(server)
    files = [
        ("content", ("c.png", _noise_png(128), "image/png")),
        ("style", ("s.png", _noise_png(16), "image/png")),
    ]
    answer = client.post("/v1/stylize", files=files, headers=ASYNC)
    assert answer.status_code == 507, answer.text
    error = answer.json()["error"]
    assert error["code"] == "store_full"
    assert "full" in error["message"]
    for internal in ("rollback", "transaction", "sqlite", "database or disk", "command not"):
        assert internal not in error["message"].lower()
    assert not store.breaker.is_open  # the store answers: a full disk is no stall
    assert client.get("/readyz").status_code == 200


@pytest.mark.parametrize("backend", ["sqlite", "redis", "redis-room"])
def test_a_result_that_does_not_fit_fails_its_job_once_with_storage_full(
    client_factory, fakes, monkeypatch, backend, request
):
    """The job is held at a step while the disk fills (room left for a small write, not
    for its result; Redis: over its maxmemory): it ends ``failed`` with ``storage_full``
    after one attempt, and the model ran it once. ``redis-room``: Redis under its
    maxmemory by less than the result (Redis itself would take it, and pass the limit)."""
    client, server = _client(client_factory, backend.split("-")[0], request)
    client.post("/v1/generate", json={"prompt": "warm up"})
    model = fakes.dit["cpu"]
    monkeypatch.setattr(type(model), "image_size", 256)  # a noisy 256 px PNG: ~200 KB
    runs = len(model.calls)
    model.step_gate = threading.Semaphore(1)
    job = client.post("/v1/generate", json={"prompt": "b", "steps": 3}, headers=ASYNC).json()
    wait_until(lambda: len(model.calls) == runs + 1)
    if server is None:
        fill(client.app.state.store, spare_pages=8)
    else:
        _full_redis(server, room=50_000 if backend == "redis-room" else -1)
    for _ in range(10):
        model.step_gate.release()
    wait_until(lambda: client.get(f"/v1/jobs/{job['id']}").json()["state"] != "running")
    final = client.get(f"/v1/jobs/{job['id']}").json()
    assert final["state"] == "failed"
    assert final["error"]["code"] == "storage_full"
    assert "full" in final["error"]["message"]
    assert final["attempts"] == 1
    assert len(model.calls) == runs + 1  # never run again
    assert not client.app.state.store.breaker.is_open


def test_expired_jobs_give_their_disk_back(tmp_path):
    """Results kept in the database (each under ``FILE_MIN_BYTES``) stored then expired:
    after the reaper's round the database file and its write-ahead log are back near
    their empty size."""

    async def scenario() -> None:
        now = [1000.0]
        path = tmp_path / "jobs.db"
        store = SqliteJobStore(path, StoreLimits(ttl_s=10.0), clock=lambda: now[0])
        await store.start()
        try:
            empty = path.stat().st_size
            for index in range(40):
                record = JobRecord(id=new_job_id(), kind="generate", model="dit", owner="o")
                await store.create(record, b"{}", owner_max_jobs=100)
                await store.finish(
                    record.id, "succeeded", result=Packed((bytes(FILE_MIN_BYTES - index),))
                )
            wal = path.with_name(path.name + "-wal")
            assert path.stat().st_size + wal.stat().st_size > 40 * (FILE_MIN_BYTES - 40)
            now[0] += 60
            await store.reap()
            assert path.stat().st_size < empty + 200_000
            assert not wal.exists() or wal.stat().st_size < 200_000
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_store_made_before_gives_space_back_after_its_next_start(tmp_path):
    """A database written without ``auto_vacuum`` (every store before this one) is
    rebuilt once when opened: its jobs are kept, and its free pages can be given back."""

    async def scenario() -> None:
        path = tmp_path / "jobs.db"
        old = sqlite3.connect(path)
        old.execute("PRAGMA journal_mode=WAL")
        old.executescript(SCHEMA)
        old.close()
        store = SqliteJobStore(path, StoreLimits())
        await store.start()
        record = JobRecord(id=new_job_id(), kind="generate", model="dit", owner="o")
        await store.create(record, b"{}", owner_max_jobs=10)
        await store.close()

        assert sqlite3.connect(path).execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        again = SqliteJobStore(path, StoreLimits())
        await again.start()
        try:
            assert (await again.get(record.id)) is not None
        finally:
            await again.close()

    asyncio.run(scenario())

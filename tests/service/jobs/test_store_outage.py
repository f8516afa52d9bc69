"""A stalled job store answers fast: the breaker (unit, with hangs made by construction)
and a real Redis paused with SIGSTOP under the app; full stores answer 507."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time

import pytest
from fastapi.testclient import TestClient
from service_fakes import Fakes, make_settings

from service.app import create_app
from service.errors import StoreFull, StoreUnavailable
from service.jobs.breaker import BULK_BYTES_PER_S, Breaker
from service.jobs.redis_store import RedisJobStore
from service.jobs.sqlite_store import SqliteJobStore
from service.jobs.store import StoreLimits

pytestmark = pytest.mark.timeout(120)


class Store:
    """A store whose calls hang while ``stalled`` (an event never set), and answer else."""

    def __init__(self) -> None:
        self.stalled = False
        self.started = 0
        self.never = asyncio.Event()

    async def call(self) -> str:
        self.started += 1
        if self.stalled:
            await self.never.wait()
        return "answer"

    async def probe(self) -> None:
        if self.stalled:
            await self.never.wait()


def test_a_stall_opens_the_breaker_then_calls_fail_at_once_until_a_probe_answers():
    async def scenario() -> None:
        store = Store()
        breaker = Breaker("the store", store.probe, call_timeout_s=0.2, probe_interval_s=0.05)
        assert await breaker.call(store.call()) == "answer"
        store.stalled = True
        with pytest.raises(StoreUnavailable) as first:
            await breaker.call(store.call())
        assert breaker.is_open and "not answering" in first.value.message
        assert first.value.headers["Retry-After"] == "1"
        calls = store.started
        start = time.monotonic()
        for _ in range(50):  # failing fast: none of them reaches the store
            with pytest.raises(StoreUnavailable):
                await breaker.call(store.call())
        assert store.started == calls and time.monotonic() - start < 0.2
        store.stalled = False
        for _ in range(100):
            if not breaker.is_open:
                break
            await asyncio.sleep(0.02)
        assert not breaker.is_open  # the probe saw the store again
        assert await breaker.call(store.call()) == "answer"
        await breaker.close()

    asyncio.run(scenario())


def test_an_unreachable_store_opens_it_and_a_full_one_does_not():
    async def scenario() -> None:
        async def refused() -> None:
            raise StoreUnavailable("connection refused")

        async def full() -> None:
            raise StoreFull("disk full")

        never = asyncio.Event()
        breaker = Breaker("the store", never.wait, call_timeout_s=0.2, probe_interval_s=10)
        with pytest.raises(StoreFull):
            await breaker.call(full())
        assert not breaker.is_open  # it answers: reads still work
        with pytest.raises(StoreUnavailable):
            await breaker.call(refused())
        assert breaker.is_open
        await breaker.close()

    asyncio.run(scenario())


def test_a_calls_payload_adds_to_its_time():
    breaker = Breaker("the store", lambda: asyncio.sleep(0), call_timeout_s=1.0)
    assert breaker.timeout_for(0) == 1.0
    assert breaker.timeout_for(2 * BULK_BYTES_PER_S) == 3.0


def test_a_call_queued_behind_a_big_write_does_not_open_the_breaker():
    """A store that moves one payload at a time: a write of 3 s worth of bytes (at
    ``BULK_BYTES_PER_S``) that takes 1 s, and a small read queued behind it, which waits
    that second (five times its own budget): no stall, the breaker stays closed."""

    async def scenario() -> None:
        one_at_a_time = asyncio.Lock()

        async def big_write() -> str:
            async with one_at_a_time:
                await asyncio.sleep(1.0)
                return "written"

        async def small_read() -> str:
            async with one_at_a_time:
                return "read"

        breaker = Breaker("the store", lambda: asyncio.sleep(0), call_timeout_s=0.2)
        write = asyncio.create_task(breaker.call(big_write(), payload_bytes=3 * BULK_BYTES_PER_S))
        await asyncio.sleep(0)  # the write holds the store
        assert await breaker.call(small_read()) == "read"
        assert await write == "written"
        assert not breaker.is_open
        assert await breaker.call(small_read()) == "read"
        await breaker.close()

    asyncio.run(scenario())


def test_a_full_sqlite_disk_is_a_507_and_a_read_only_one_a_503(tmp_path, monkeypatch):
    async def scenario() -> None:
        store = SqliteJobStore(tmp_path / "jobs.db", StoreLimits())
        await store.start()
        try:
            for message, error, status in (
                ("database or disk is full", StoreFull, 507),
                ("attempt to write a readonly database", StoreUnavailable, 503),
            ):

                def failing(*args, message=message):
                    raise sqlite3.OperationalError(message)

                with pytest.raises(error) as raised:
                    await store._run(failing)
                assert raised.value.status_code == status
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_redis_probe_answered_by_another_reply_is_no_answer(own_redis, monkeypatch):
    """The breaker's probe closes it only on its own answer: a reply a connection held
    from before (what a paused Redis once let a PING return) counts as no answer."""

    async def scenario() -> None:
        store = RedisJobStore(own_redis.url, StoreLimits(), prefix="probe:")
        await store.start()
        try:
            await store._probe()  # the real answer
            real_echo = store._redis.echo

            async def stale(value):
                await real_echo(value)
                return b"PONG"

            monkeypatch.setattr(store._redis, "echo", stale)
            with pytest.raises(StoreUnavailable, match="another reply"):
                await store._probe()
        finally:
            await store.close()

    asyncio.run(scenario())


def _timed(call):
    start = time.monotonic()
    response = call()
    return response, time.monotonic() - start


def test_a_paused_redis_gets_fast_503s_and_the_service_recovers_by_itself(own_redis):
    """SIGSTOP of the app's Redis: the first call waits about the call timeout, later ones
    answer 503 at once, /readyz names the store within its budget, /healthz and a
    synchronous request that needs no store still work; after SIGCONT the breaker closes
    by itself and jobs are answered again."""
    settings = make_settings(
        redis_url=own_redis.url, redis_prefix="outage:", store_call_timeout_s=1.0
    )
    with TestClient(create_app(settings, model_entries=Fakes().entries())) as client:
        job = client.post(
            "/v1/generate", json={"prompt": "x", "steps": 2}, headers={"Prefer": "respond-async"}
        ).json()
        assert client.get("/readyz").status_code == 200
        os.kill(own_redis.process.pid, signal.SIGSTOP)
        try:
            probe, probe_s = _timed(lambda: client.get("/readyz"))  # the first call: its budget
            assert probe.status_code == 503 and probe_s < 1.0
            first, first_s = _timed(lambda: client.get(f"/v1/jobs/{job['id']}"))
            assert first.status_code == 503 and first.json()["error"]["code"] == "store_unavailable"
            assert first_s < 2 * settings.store_call_timeout_s + 1
            for _ in range(5):
                again, again_s = _timed(lambda: client.get(f"/v1/jobs/{job['id']}"))
                assert again.status_code == 503 and again_s < 0.5
                assert "Retry-After" in again.headers
            ready, ready_s = _timed(lambda: client.get("/readyz"))
            assert ready.status_code == 503 and ready_s < 0.5
            assert "Redis" in ready.json()["dependencies"]["store"]
            submit, submit_s = _timed(
                lambda: client.post(
                    "/v1/generate", json={"prompt": "y"}, headers={"Prefer": "respond-async"}
                )
            )
            assert submit.status_code == 503 and submit_s < 0.5
            assert client.get("/healthz").status_code == 200
            assert client.get("/metrics").status_code == 200
            sync = client.post("/v1/generate", json={"prompt": "a red circle", "steps": 2})
            assert sync.status_code == 200  # needs no store
        finally:
            os.kill(own_redis.process.pid, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the breaker never closed"
            time.sleep(0.05)
        assert client.get(f"/v1/jobs/{job['id']}").status_code == 200
        assert client.get("/readyz").json()["dependencies"] == {"store": "ok"}

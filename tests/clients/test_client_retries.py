"""Retries against real servers: a 429 waits the ``Retry-After`` the server sent, and a
POST whose server is killed while it runs is sent again with the same
``Idempotency-Key`` to the restarted server, which answers the first request's job:
one job, never two.

The first server is ``tests/service/replica.py`` in a process of its own (so it can be
killed); the restarted one runs in the test's process on the same port and store. The kill is by construction: the replica's fake models wait before their second step
while a hold file exists, so the request is in flight, its job stored and running, when
the test kills the process."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn
from atelier_client import Client, GenerateResult, RateLimited, Retry
from client_helpers import pixels_of
from redis_server import free_port
from service_fakes import Fakes, FakeTextToImage, make_settings, served
from starlette.types import ASGIApp

from service.app import create_app

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


def test_a_429_waits_the_retry_after_the_server_sent(tmp_path):
    retries: list[tuple[str, float]] = []
    app = create_app(make_settings(key_rate=1.0), model_entries=Fakes().entries())
    with served(app) as url:
        with Client(url, retry=Retry(attempts=1)) as impatient:
            impatient.generate("a red circle", seed=1, steps=1)
            with pytest.raises(RateLimited) as caught:  # one request a second, no retry
                impatient.generate("a red circle", seed=1, steps=1)
        assert caught.value.status == 429 and caught.value.retry_after == 1.0
        on_retry = lambda reason, delay: retries.append((reason, delay))  # noqa: E731
        keys: list[str | None] = []
        recording = httpx.HTTPTransport()
        original = recording.handle_request

        def record(request: httpx.Request) -> httpx.Response:
            keys.append(request.headers.get("idempotency-key"))
            return original(request)

        recording.handle_request = record  # type: ignore[method-assign]
        with Client(url, retry=Retry(on_retry=on_retry), transport=recording) as client:
            started = time.monotonic()
            result = client.generate("a red circle", seed=1, steps=1)
            waited, retried = time.monotonic() - started, len(retries)
            client.generate("a red circle", seed=2, steps=1)
    assert retried and retries[0] == ("429 rate_limited", 1.0)
    assert waited >= 1.0 * retried
    # every POST carries a key, the same on each retry of a call, another for the next call
    first, second = keys[: retried + 1], keys[retried + 1 :]
    assert None not in keys and len(set(first)) == 1 and len(set(second)) == 1
    assert set(second).isdisjoint(first)
    np.testing.assert_array_equal(pixels_of(result.images[0]), FakeTextToImage.pixels(1))


@contextmanager
def _replica(port: int, state_dir: Path, hold: Path, log: Path) -> Iterator[subprocess.Popen]:
    env = {
        **os.environ,
        "ATELIER_HOST": "127.0.0.1",
        "ATELIER_PORT": str(port),
        "ATELIER_DEVICES": "cpu",
        "ATELIER_LOAD_MODELS": "adain,dit",
        "ATELIER_STATE_DIR": str(state_dir),
        "ATELIER_JOB_LEASE_S": "1",
        "ATELIER_JOB_PROGRESS_INTERVAL_S": "0",
        "ATELIER_MAX_BATCH_WAIT_MS": "1",
        "REPLICA_HOLD": str(hold),
    }
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/service/replica.py"), "serve"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def _jobs(state_dir: Path) -> list[tuple[str, str]]:
    """``(id, state)`` of every job in the replica's SQLite store (read beside it)."""
    path = state_dir / "jobs.db"
    if not path.exists():
        return []
    with sqlite3.connect(path, timeout=5) as db:
        try:
            return db.execute("SELECT id, state FROM jobs").fetchall()
        except sqlite3.OperationalError:  # the table is not made yet
            return []


def _until(condition, what: str, limit_s: float = 60.0):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_post_whose_server_is_killed_mid_request_makes_one_job(tmp_path):
    port, state_dir, hold, log = (
        free_port(),
        tmp_path / "state",
        tmp_path / "hold",
        tmp_path / "log",
    )
    hold.touch()
    outcome: list[GenerateResult | BaseException] = []
    retries: list[str] = []
    policy = Retry(attempts=400, budget_s=90, backoff_s=0.1, max_backoff_s=0.25)
    policy.on_retry = lambda reason, delay: retries.append(reason)

    def call() -> None:
        with Client(f"http://127.0.0.1:{port}", retry=policy) as client:
            try:
                outcome.append(client.generate("a red circle", seed=7, num_images=2, steps=4))
            except BaseException as exc:  # handed to the test's thread
                outcome.append(exc)

    with _replica(port, state_dir, hold, log) as first:
        _until(lambda: _answers(port), "the first server")
        caller = threading.Thread(target=call)
        caller.start()
        # the request's job is stored and running, held before its second step
        _until(lambda: [state for _, state in _jobs(state_dir)] == ["running"], "a running job")
        first.kill()
        first.wait(10)
    hold.unlink()
    # the same server restarted, in this process this time (starting sooner)
    settings = make_settings(state_dir=state_dir, job_lease_s=1.0)
    with _serve_on(port, create_app(settings, model_entries=Fakes().entries())):
        caller.join(90)
    assert not caller.is_alive(), log.read_text()[-3000:]
    (result,) = outcome
    assert isinstance(result, GenerateResult), result
    assert any("Error" in reason for reason in retries)  # it was retried after no answer
    assert result.seeds == [7, 8]
    for data, seed in zip(result.images, result.seeds, strict=True):
        np.testing.assert_array_equal(pixels_of(data), FakeTextToImage.pixels(seed))
    assert [state for _, state in _jobs(state_dir)] == ["succeeded"]  # one job, never two


@contextmanager
def _serve_on(port: int, app: ASGIApp) -> Iterator[None]:
    """uvicorn serving ``app`` on ``port`` in a thread, until the block ends."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_a_refused_event_stream_falls_back_to_polling(tmp_path):
    """With its key's one stream taken (``key_max_event_streams=1``), ``wait`` is
    refused a stream (429 ``too_many_streams``) and polls the job to its end instead."""
    hold = tmp_path / "hold"
    hold.touch()  # both jobs wait before their second step until the test lets them go
    app = create_app(make_settings(key_max_event_streams=1), model_entries=Fakes(hold).entries())
    seen: list[object] = []
    with served(app) as url, Client(url) as client, httpx.Client(base_url=url) as raw:
        first = client.submit_generate("a red circle", seed=1, steps=3)
        second = client.submit_generate("a red circle", seed=2, steps=3)
        with raw.stream("GET", f"/v1/jobs/{first.id}/events") as taken:
            assert taken.status_code == 200
            refused = raw.get(f"/v1/jobs/{second.id}/events", timeout=5)
            assert refused.status_code == 429 and "too_many_streams" in refused.text
            follower = threading.Thread(
                target=lambda: seen.append(client.wait(second, progress=seen.append))
            )
            follower.start()
            _until(lambda: seen, "the first polled progress")
            hold.unlink()
            follower.join(30)
    assert seen[-1].state == "succeeded" and seen[-1].id == second.id
    assert seen[-2].step == 3  # progress came from the polls

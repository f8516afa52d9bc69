"""Fixtures of the job store's tests."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from redis_server import RedisMissing, RedisServer


@pytest.fixture
def own_redis(tmp_path) -> Iterator[RedisServer]:
    """A redis-server of the test's own, to stop, restart or pause with SIGSTOP (the
    session's ``redis_server`` is shared); skipped where none is installed."""
    try:
        server = RedisServer(tmp_path / "redis").start()
    except RedisMissing as exc:
        pytest.skip(str(exc))
    yield server
    if server.process is not None and server.process.poll() is None:
        os.kill(server.process.pid, signal.SIGCONT)  # a test that paused it and failed
    server.stop(kill=True)

"""``atelier serve`` in a subprocess on 127.0.0.1, for tests that need a real uvicorn."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LiveServer:
    process: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connect(self, timeout_s: float = 30.0) -> socket.socket:
        """A raw TCP connection to the server; reads block at most ``timeout_s``."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s)
        return sock

    def log(self) -> str:
        """Everything the server wrote (call after it stopped)."""
        return self.process.stdout.read().decode()


@contextmanager
def live_server(settings: dict[str, str] | None = None, *args: str) -> Iterator[LiveServer]:
    """Start ``atelier serve`` with ``ATELIER_*`` settings (no models unless asked) and
    wait until ``/healthz`` answers; kill it on exit if it is still running."""
    port = free_port()
    env = {
        **os.environ,
        "ATELIER_LOAD_MODELS": "nothing",
        "ATELIER_STATE_DIR": tempfile.mkdtemp(prefix="atelier-state-"),
    }
    env.update({f"ATELIER_{key.upper()}": value for key, value in (settings or {}).items()})
    command = [sys.executable, "-m", "service.cli", "serve", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--devices", "cpu", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    server = LiveServer(process, port)
    try:
        for _ in range(600):
            if process.poll() is not None:
                raise RuntimeError(f"the server exited: {server.log()}")
            try:
                httpx.get(f"{server.url}/healthz", timeout=1.0)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise RuntimeError("the server never answered")
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection, by a FIN or a reset
    (a read that times out raises ``TimeoutError``)."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)

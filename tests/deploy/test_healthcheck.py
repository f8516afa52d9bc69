"""deploy/healthcheck.py, the image's and compose's health probe, against a local server."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from deploy_files import ROOT

SCRIPT = ROOT / "deploy" / "healthcheck.py"


class _Handler(http.server.BaseHTTPRequestHandler):
    statuses: dict[str, int] = {}
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.seen.append(self.path)
        status = self.statuses.get(self.path, 404)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[int, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {"statuses": {}, "seen": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def _probe(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the script as the image does: ``python deploy/healthcheck.py``, port from env."""
    env = {**os.environ, "ATELIER_PORT": str(port)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_healthy_when_healthz_answers_200(server):
    port, handler = server
    handler.statuses["/healthz"] = 200
    result = _probe(port)
    assert result.returncode == 0, result.stderr
    assert handler.seen == ["/healthz"]


@pytest.mark.parametrize("status", [500, 503])
def test_unhealthy_on_an_error_status(server, status):
    port, handler = server
    handler.statuses["/healthz"] = status
    result = _probe(port)
    assert result.returncode == 1
    assert str(status) in result.stderr


def test_unhealthy_when_nothing_listens():
    result = _probe(_free_port())
    assert result.returncode == 1
    assert "unhealthy" in result.stderr


def test_another_path_can_be_probed(server):
    port, handler = server
    handler.statuses["/readyz"] = 503
    handler.statuses["/healthz"] = 200
    assert _probe(port, "/readyz").returncode == 1
    assert handler.seen == ["/readyz"]


def test_rejects_a_path_without_leading_slash():
    result = _probe(_free_port(), "healthz")
    assert result.returncode == 2
    assert "must start with '/'" in result.stderr

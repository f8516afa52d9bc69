"""A client that disconnects, against a real uvicorn server (fake models): its work stops
and the request is logged and counted as 499, not 200."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import pytest
from service_fakes import Fakes, make_settings, served

from service.app import create_app

pytestmark = pytest.mark.timeout(60)


def _metric(url: str, name: str, labels: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_disconnected_client_stops_its_work_and_is_logged_as_499():
    fakes = Fakes()
    app = create_app(make_settings(max_batch_size=1), model_entries=fakes.entries())
    with served(app) as url:
        urllib.request.urlopen(url + "/readyz", timeout=10)
        model = fakes.dit["cpu"]
        model.step_gate = threading.Semaphore(1)
        body = json.dumps({"prompt": "slow", "steps": 50}).encode()
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert model.wait_for_steps(1)
        # the client is gone; wait (bounded) until the server has noticed it
        for _ in range(200):
            if _metric(url, "atelier_http_requests_total", 'status="499"'):
                break
            time.sleep(0.05)
        for _ in range(60):
            model.step_gate.release()
        assert _metric(url, "atelier_http_requests_total", 'status="499"') == 1.0
        assert _metric(url, "atelier_http_requests_total", 'route="/v1/generate",status="200"') == 0
        model.step_gate = None
        # the worker is free: the next request is served at once
        request = urllib.request.Request(
            url + "/v1/generate",
            data=json.dumps({"prompt": "next", "steps": 2}).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert urllib.request.urlopen(request, timeout=10).status == 200
        assert _metric(url, "atelier_cancelled_total", 'stage="running"') == 1.0
    assert model.step_rows[:1] == [[0]] and len(model.step_rows) == 1 + 2

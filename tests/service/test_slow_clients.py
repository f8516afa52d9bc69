"""Slow and surplus clients against a real uvicorn (``atelier serve``) on 127.0.0.1.

Each test blocks on the server's answer or on it closing the connection (reads time
out after 30 s, far above the limits set here, so a missing limit fails the test).
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time

import httpx
import pytest
from live_server import live_server, read_until_closed

pytestmark = pytest.mark.timeout(120)

_HEAD = b"POST /v1/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


def _status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def _body(response: bytes) -> dict:
    return json.loads(response.partition(b"\r\n\r\n")[2])


@pytest.fixture(scope="module")
def strict_server():
    settings = {"header_timeout_s": "1", "body_timeout_s": "1", "keep_alive_timeout_s": "1"}
    with live_server(settings) as server:
        yield server


def test_a_connection_that_sends_nothing_is_closed(strict_server):
    with strict_server.connect() as sock:
        response = read_until_closed(sock)
    assert _status(response) == 408
    assert _body(response)["error"]["code"] == "header_timeout"


def test_headers_that_never_end_are_closed(strict_server):
    with strict_server.connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1\r\n")
        response = read_until_closed(sock)
    assert _status(response) == 408


def test_a_slow_second_request_on_a_keep_alive_connection_is_closed(strict_server):
    with strict_server.connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = sock.recv(65536)
        assert _status(first) == 200
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # the next head starts, then stalls
        rest = read_until_closed(sock)
    assert _status(rest) == 408


def test_a_body_that_stalls_answers_408_and_closes(strict_server):
    with strict_server.connect() as sock:
        sock.sendall(_HEAD + b"Content-Length: 100\r\n\r\n" + b'{"prompt": ')
        response = read_until_closed(sock)
    assert _status(response) == 408
    assert _body(response)["error"]["code"] == "body_timeout"
    assert httpx.get(f"{strict_server.url}/healthz").status_code == 200


def test_an_early_answer_closes_a_connection_whose_body_is_still_coming(strict_server):
    """A bad upload is refused before its body ends; a client that keeps trickling the
    rest must not keep the connection (uvicorn would read the body to its end)."""
    with strict_server.connect() as sock:
        sock.sendall(
            b"POST /v1/stylize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n"
            b"Content-Type: multipart/form-data; boundary=x\r\n\r\nnot multipart"
        )
        stop = threading.Event()

        def trickle() -> None:
            while not stop.wait(0.2):
                try:
                    sock.sendall(b"b")
                except OSError:
                    return

        sender = threading.Thread(target=trickle)
        sender.start()
        try:
            response = read_until_closed(sock)
        finally:
            stop.set()
            sender.join()
    assert _status(response) == 400


def test_connections_beyond_the_cap_get_503():
    with live_server({"max_connections": "3"}) as server:
        idle = [server.connect() for _ in range(3)]
        try:
            with server.connect() as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                response = read_until_closed(sock)
        finally:
            for connection in idle:
                connection.close()
        assert _status(response) == 503
        with server.connect() as sock:  # the idle ones are gone: served again
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert _status(read_until_closed(sock)) == 200


def _in_flight(url: str) -> float:
    """The ``atelier_http_requests_in_flight`` gauge, the scrape itself included."""
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("atelier_http_requests_in_flight "):
            return float(line.split()[-1])
    raise AssertionError("no in-flight gauge")


def test_sigterm_drains_new_work_gets_503_until_in_flight_work_ends():
    with live_server({"body_timeout_s": "60"}) as server:
        slow = server.connect()
        slow.sendall(_HEAD + b"Content-Length: 20\r\n\r\n" + b'{"prompt"')  # in flight
        for _ in range(300):
            if _in_flight(server.url) >= 2:
                break
        else:
            pytest.fail("the slow request never reached the app")
        server.process.send_signal(signal.SIGTERM)
        for _ in range(300):  # until the signal handler has run
            late = httpx.post(f"{server.url}/v1/generate", json={"prompt": "x"})
            if late.json()["error"]["code"] == "shutting_down":  # a ConnectError fails
                break
        assert late.json()["error"]["code"] == "shutting_down"
        assert httpx.get(f"{server.url}/readyz").status_code == 503
        assert httpx.get(f"{server.url}/v1/models").status_code == 200  # reads go on
        assert server.process.poll() is None  # still serving the request in flight
        slow.sendall(b': "a"}' + b" " * 5)
        answer = read_until_closed(slow)
        slow.close()
        # served by the app (it came in before the drain): no model is loaded here
        assert _body(answer)["error"]["code"] == "model_not_loaded"
        assert server.process.wait(timeout=60) in (0, -signal.SIGTERM)
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{server.url}/healthz", timeout=2.0)
    assert "drain over" in server.log()


def test_sigterm_with_a_grace_period_leaves_rotation_before_refusing_anyone():
    """With ``drain_grace_s``, a stop signal first fails ``/readyz`` (a load balancer takes
    the replica out) while new requests are still served; then they get 503 while the
    request in flight finishes."""
    with live_server({"drain_grace_s": "3", "body_timeout_s": "60"}) as server:
        readiness = httpx.get(f"{server.url}/readyz").json()["error"]["code"]
        assert readiness == "not_ready"  # no model is loaded here
        slow = server.connect()
        slow.sendall(_HEAD + b"Content-Length: 20\r\n\r\n" + b'{"prompt"')  # in flight
        server.process.send_signal(signal.SIGTERM)
        for _ in range(300):  # until the signal handler has run
            readiness = httpx.get(f"{server.url}/readyz").json()["error"]["code"]
            if readiness == "shutting_down":
                break
        assert readiness == "shutting_down"
        still = httpx.post(f"{server.url}/v1/generate", json={"prompt": "x"})
        assert still.json()["error"]["code"] == "model_not_loaded"  # still served
        deadline = time.monotonic() + 30  # the 3 s grace, whatever the machine's speed
        while time.monotonic() < deadline:
            late = httpx.post(f"{server.url}/v1/generate", json={"prompt": "x"})
            if late.json()["error"]["code"] == "shutting_down":  # a ConnectError fails
                break
            time.sleep(0.05)
        assert late.json()["error"]["code"] == "shutting_down"
        slow.sendall(b': "a"}' + b" " * 5)
        assert _body(read_until_closed(slow))["error"]["code"] == "model_not_loaded"
        slow.close()
        assert server.process.wait(timeout=60) in (0, -signal.SIGTERM)


def test_a_head_over_16_kib_is_refused_even_when_it_arrives_whole(strict_server):
    big = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
    with strict_server.connect() as sock:
        sock.sendall(big)  # one write: h11 alone would parse it
        response = read_until_closed(sock)
    assert _status(response) == 431
    assert _body(response)["error"]["code"] == "header_too_large"
    with strict_server.connect() as sock:  # a head just under the cap, body and all, passes
        head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 15_000 + b"\r\n\r\n"
        sock.sendall(head)
        assert _status(sock.recv(65536)) == 200


def _seed_waiting_job(state_dir) -> str:
    """A job of a model no process serves here: it waits in the queue for good."""
    from service.jobs.records import JobRecord, new_job_id
    from service.jobs.sqlite_store import SqliteJobStore
    from service.jobs.store import StoreLimits

    async def seed() -> str:
        store = SqliteJobStore(state_dir / "jobs.db", StoreLimits())
        await store.start()
        record = JobRecord(id=new_job_id(), kind="generate", model="dit", owner="anonymous")
        await store.create(record, b"input", owner_max_jobs=10)
        await store.close()
        return record.id

    return asyncio.run(seed())


def test_event_streams_do_not_lock_other_clients_out(tmp_path):
    """Five streams of one client on a server capped at four connections: everyone else
    is still served; the client's sixth stream is refused by its own limit."""
    job = _seed_waiting_job(tmp_path)
    settings = {"state_dir": str(tmp_path), "max_connections": "4", "key_max_event_streams": "5"}
    with live_server(settings) as server:
        streams = []
        for _ in range(5):
            sock = server.connect()
            sock.sendall(f"GET /v1/jobs/{job}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert b"200 OK" in sock.recv(65536)  # the head of a stream that stays open
            streams.append(sock)
        probes = [httpx.get(f"{server.url}/healthz", timeout=10) for _ in range(3)]
        job_read = httpx.get(f"{server.url}/v1/jobs/{job}", timeout=10)
        sixth = httpx.get(f"{server.url}/v1/jobs/{job}/events", timeout=10)
        for sock in streams:
            sock.close()
    assert [p.status_code for p in probes] == [200, 200, 200]
    assert job_read.status_code == 200 and job_read.json()["state"] == "queued"
    assert sixth.status_code == 429 and sixth.json()["error"]["code"] == "too_many_streams"


def test_event_streams_that_end_together_close_without_filling_the_cap(tmp_path):
    """Five streams of a job on a server capped at four connections; the job is cancelled
    and every stream ends at once. Others are served at that moment (the streams'
    connections, counted again while their clients hold them, would fill the cap), and
    the server closes each stream's connection (not after the 5 s keep-alive)."""

    def read_to_the_end(sock) -> bytes:
        answer = b""
        while not answer.endswith(b"0\r\n\r\n"):  # the last chunk of the stream
            answer += sock.recv(65536)
        return answer

    job = _seed_waiting_job(tmp_path)
    settings = {"state_dir": str(tmp_path), "max_connections": "4", "key_max_event_streams": "5"}
    with live_server(settings) as server:
        streams = []
        for _ in range(5):
            sock = server.connect(timeout_s=10)
            sock.sendall(f"GET /v1/jobs/{job}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert b"200 OK" in sock.recv(65536)
            streams.append(sock)
        cancel = httpx.delete(f"{server.url}/v1/jobs/{job}", timeout=10)
        answers = [read_to_the_end(sock) for sock in streams]  # the clients hold on
        probes = [httpx.get(f"{server.url}/healthz", timeout=10) for _ in range(3)]
        for sock in streams:
            sock.settimeout(2.0)
        after = [read_until_closed(sock) for sock in streams]
        for sock in streams:
            sock.close()
    assert cancel.status_code == 200 and cancel.json()["state"] == "cancelled"
    assert all(b"event: done" in answer for answer in answers)
    assert [p.status_code for p in probes] == [200, 200, 200]
    assert after == [b""] * 5

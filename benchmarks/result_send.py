"""A big job result downloaded: the server's CPU when its bytes are streamed through
Python, chunk by chunk, against sent from the disk by ``sendfile``.

One job that succeeded with a ``--mb`` MB result (random bytes, kept on the blob volume)
is seeded into a fresh store; one server process (the real app, on uvicorn with the
service's protocol, 127.0.0.1) serves it through ``GET /v1/jobs/{id}/result``. The route
sends it by the protocol's zero-copy send (``service.protocol.FileSpanResponse``); a
download with the header ``X-Bench-Streamed`` has the extension taken from its scope
first, so the route streams it as it does where the server offers none (its chunked
reads of the volume). A client in this process makes ``--reads`` downloads each way,
alternating, reading the bytes to nothing; the server's user and system CPU seconds
(``/proc``) are summed over each way's downloads.

Usage:
    python benchmarks/result_send.py [--mb 80] [--reads 10]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from service.app import create_app, open_store
from service.config import Settings
from service.jobs.records import JobRecord, JobResult, new_job_id
from service.protocol import ZERO_COPY_SEND, HeadTimeoutProtocol

STREAMED_HEADER = b"x-bench-streamed"


class StreamedOnRequest:
    """ASGI middleware: a request with ``X-Bench-Streamed`` is not offered the zero-copy
    send (the route then streams its answer)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and any(k == STREAMED_HEADER for k, _ in scope["headers"]):
            extensions = dict(scope.get("extensions") or {})
            extensions.pop(ZERO_COPY_SEND, None)
            scope = {**scope, "extensions": extensions}
        await self.app(scope, receive, send)


def settings_for(state_dir: str) -> Settings:
    return Settings(state_dir=Path(state_dir), load_models="", devices="cpu", _env_file=None)


def serve(state_dir: str, port: int) -> None:
    """The server process: the app on uvicorn with the service's protocol."""
    app = StreamedOnRequest(create_app(settings_for(state_dir)))
    protocol = partial(HeadTimeoutProtocol, header_timeout_s=30.0)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=protocol, log_level="warning")  # type: ignore[arg-type]
    uvicorn.Server(config).run()


async def seed(state_dir: str, size: int) -> str:
    """A succeeded job whose one result is ``size`` random bytes; its id."""
    store = open_store(settings_for(state_dir))
    await store.start()
    try:
        job = JobRecord(id=new_job_id(), kind="stylize", model="adain", owner="anonymous")
        await store.create(job, b"input", owner_max_jobs=1)
        await store.claim("bench", "adain", ("background",), 60.0)
        result = JobResult([os.urandom(size)], "image/png", {}).packed()
        await store.finish(job.id, "succeeded", result=result)
        return job.id
    finally:
        await store.close()


def cpu_s(pid: int) -> tuple[float, float]:
    """A process's user and system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=80, help="the result's size")
    parser.add_argument("--reads", type=int, default=10, help="downloads each way")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="atelier-send-") as state_dir:
        job = asyncio.run(seed(state_dir, args.mb * 2**20))
        port = free_port()
        server = multiprocessing.get_context("spawn").Process(target=serve, args=(state_dir, port))
        server.start()
        assert server.pid is not None
        try:
            totals = measure(f"http://127.0.0.1:{port}", job, server.pid, args.reads)
        finally:
            server.terminate()
            server.join()
    report(totals)


WAYS = {"streamed through Python": {"X-Bench-Streamed": "1"}, "sent by sendfile": {}}


def measure(url: str, job: str, pid: int, reads: int) -> dict[str, list[float]]:
    """Per way: [bytes, user s, system s, wall s] over its downloads."""
    totals = {way: [0.0, 0.0, 0.0, 0.0] for way in WAYS}
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(600):
            try:
                client.get("/healthz")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        for round_ in range(reads + 1):  # the first round warms up
            for way, headers in WAYS.items():
                user, system = cpu_s(pid)
                started = time.perf_counter()
                size = 0
                with client.stream("GET", f"/v1/jobs/{job}/result", headers=headers) as answer:
                    answer.raise_for_status()
                    for chunk in answer.iter_raw(2**20):
                        size += len(chunk)
                wall = time.perf_counter() - started
                user_after, system_after = cpu_s(pid)
                if round_:
                    spent = (size, user_after - user, system_after - system, wall)
                    totals[way] = [a + b for a, b in zip(totals[way], spent, strict=True)]
    return totals


def report(totals: dict[str, list[float]]) -> None:
    print(f"{'way':<26}{'GB':>6}{'user s/GB':>11}{'sys s/GB':>10}{'CPU s/GB':>10}{'wall s/GB':>11}")
    per_gb = {}
    for way, (size, user, system, wall) in totals.items():
        gb = size / 1e9
        per_gb[way] = (user + system) / gb
        print(
            f"{way:<26}{gb:>6.2f}{user / gb:>11.3f}{system / gb:>10.3f}"
            f"{per_gb[way]:>10.3f}{wall / gb:>11.3f}"
        )
    streamed, sent = per_gb.values()
    print(f"server CPU per GB, streamed over sent: {streamed / sent:.2f}x")


if __name__ == "__main__":
    main()

"""Fault scenarios against a real ``atelier serve`` on 127.0.0.1: what abandoned work
costs the service, and what a valid request sees meanwhile.

Scenarios (``--scenario``, repeatable; each is a function in ``SCENARIOS``):

``disconnect``
    The disconnect flood of issue 14, on the real DiT on the CPU, in rounds that
    alternate an idle phase and a flood phase so a change in the machine's background
    load hits both alike:

    * idle: ``--valid`` valid requests (``steps=--valid-steps``, one image), one after
      the other; their latencies;
    * flood: ``--clients`` clients send heavy requests (``steps=--heavy-steps``,
      ``num_images=8``) at once and disconnect after ``--disconnect-after`` s (the
      cancel point); then the same valid requests, one after the other, while the
      server drops the abandoned work.

    Work is read from ``atelier_work_units_total`` (item-steps started: sampler steps x
    images): the work done for abandoned requests after the cancel point is the growth
    of the counter from the cancel point until the server is idle, minus the valid
    requests' own work (known exactly: steps x images). Target: none, beyond the one
    step that was running when the clients left.

``deadline``
    One ``steps=1000, num_images=8`` request (within a raised ``max_image_steps``)
    that runs into ``--deadline-s``: its answer (504) and time, and the work started
    after the 504 (target: none beyond the step in flight).

Prints a table and one JSON line per scenario (``RESULT {...}``). Stops by itself; the
server is stopped with SIGTERM at the end. Usage::

    ATELIER_WEIGHTS_DIR=../shared/weights PYTHONPATH=. .venv/bin/python \\
        benchmarks/service_faults.py --scenario disconnect --scenario deadline
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``atelier serve`` in a subprocess (127.0.0.1), stopped with SIGTERM."""

    def __init__(self, *, models: str, timeout_s: float, env: dict[str, str]) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable, "-m", "service.cli", "serve",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--devices", "cpu",
            "--load-models", models,
            "--max-batch-size", "8",
            "--queue-size", "256",
            "--request-timeout-s", str(timeout_s),
            "--log-level", "warning",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=os.environ | env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server not ready in time")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# ----------------------------------------------------------------------------- metrics
def metric(url: str, name: str, must_contain: str = "") -> float:
    """Sum of the samples of ``name`` whose labels contain ``must_contain``."""
    text = httpx.get(f"{url}/metrics", timeout=10.0).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in "{ ") and must_contain in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def work(url: str) -> float:
    return metric(url, "atelier_work_units_total")


async def settle(url: str, quiet_s: float = 5.0, limit_s: float = 180.0) -> float:
    """Wait until the work counter stops moving for ``quiet_s`` (at most ``limit_s``)."""
    last, since = work(url), time.monotonic()
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        await asyncio.sleep(0.25)
        now = work(url)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return last


# ----------------------------------------------------------------------------- clients
async def post_and_leave(url: str, body: dict, after_s: float) -> None:
    """Send ``POST /v1/generate`` and close the connection after ``after_s`` seconds."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    payload = json.dumps(body).encode()
    writer.write(
        b"POST /v1/generate HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    await writer.drain()
    await asyncio.sleep(after_s)
    writer.close()
    await writer.wait_closed()


async def valid_latencies(client: httpx.AsyncClient, count: int, steps: int) -> list[float]:
    """``count`` valid requests one after the other: their latencies (s); errors raise."""
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        response = await client.post(
            "/v1/generate", json={"prompt": "a red circle", "steps": steps, "seed": i}
        )
        if response.status_code != 200:
            raise RuntimeError(f"valid request answered {response.status_code}: {response.text}")
        latencies.append(time.perf_counter() - started)
    return latencies


def p95(values: list[float]) -> float:
    return (
        statistics.quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 else values[0]
    )


# --------------------------------------------------------------------------- scenarios
async def disconnect_flood(args: argparse.Namespace) -> dict:
    server = Server(models="dit", timeout_s=120.0, env={})
    try:
        server.wait_ready()
        url = server.url
        heavy = {"prompt": "two red circles", "steps": args.heavy_steps, "num_images": 8}
        async with httpx.AsyncClient(base_url=url, timeout=120.0) as client:
            await valid_latencies(client, 2, args.valid_steps)  # warm-up
            idle, flood, first_after_flood = [], [], []
            requested = before_cancel = after_cancel = 0.0
            closed = 0.0
            for _ in range(args.rounds):
                idle += await valid_latencies(client, args.valid, args.valid_steps)
                start = await settle(url)
                closed_before = metric(url, "atelier_http_requests_total", 'status="499"')
                await asyncio.gather(
                    *(
                        post_and_leave(url, heavy, args.disconnect_after)
                        for _ in range(args.clients)
                    )
                )
                at_cancel = work(url)  # every client has left: the cancel point
                latencies = await valid_latencies(client, args.valid, args.valid_steps)
                first_after_flood.append(latencies[0])
                flood += latencies
                end = await settle(url)
                valid_work = args.valid * args.valid_steps
                requested += args.clients * args.heavy_steps * 8
                before_cancel += at_cancel - start
                after_cancel += end - at_cancel - valid_work
                closed += metric(url, "atelier_http_requests_total", 'status="499"') - closed_before
        cancelled = {
            stage: metric(url, "atelier_cancelled_total", f'stage="{stage}"')
            for stage in ("queued", "running")
        }
    finally:
        server.stop()
    result = {
        "scenario": "disconnect",
        "rounds": args.rounds,
        "clients": args.clients,
        "abandoned_item_steps_requested": requested,
        "abandoned_item_steps_before_cancel": before_cancel,
        "abandoned_item_steps_after_cancel": after_cancel,
        "logged_499": closed,
        "cancelled_items": cancelled,
        "valid_idle_p50_s": statistics.median(idle),
        "valid_idle_p95_s": p95(idle),
        "valid_flood_p50_s": statistics.median(flood),
        "valid_flood_p95_s": p95(flood),
        "flood_over_idle_p95": p95(flood) / p95(idle),
        "valid_flood_first_s": first_after_flood,
        "valid_flood_others_p50_s": statistics.median(
            [x for i, x in enumerate(flood) if i % args.valid]
        ),
    }
    print(
        f"disconnect flood: {args.rounds} rounds x {args.clients} clients leaving after "
        f"{args.disconnect_after} s (steps={args.heavy_steps}, num_images=8 each)"
    )
    print(f"  item-steps requested by abandoned requests: {requested:.0f}")
    print(f"  computed before the cancel point:           {before_cancel:.0f}")
    print(f"  computed after the cancel point:            {after_cancel:.0f}  (target 0)")
    print(f"  requests logged as 499: {closed:.0f}; items cancelled: {cancelled}")
    print(f"  valid request (steps={args.valid_steps}): idle p50 {result['valid_idle_p50_s']:.3f} s "
          f"p95 {result['valid_idle_p95_s']:.3f} s | flood p50 {result['valid_flood_p50_s']:.3f} s "
          f"p95 {result['valid_flood_p95_s']:.3f} s | p95 ratio {result['flood_over_idle_p95']:.2f} "
          "(target < 2)")  # fmt: skip
    print(f"  first valid request after each flood: "
          f"{', '.join(f'{x:.3f}' for x in first_after_flood)} s; the others' p50 "
          f"{result['valid_flood_others_p50_s']:.3f} s")  # fmt: skip
    return result


async def deadline(args: argparse.Namespace) -> dict:
    server = Server(
        models="dit", timeout_s=args.deadline_s, env={"ATELIER_MAX_IMAGE_STEPS": "8000"}
    )
    try:
        server.wait_ready()
        url = server.url
        async with httpx.AsyncClient(base_url=url, timeout=args.deadline_s + 60) as client:
            await valid_latencies(client, 1, args.valid_steps)
            start = await settle(url)
            started = time.perf_counter()
            response = await client.post(
                "/v1/generate", json={"prompt": "a red circle", "steps": 1000, "num_images": 8}
            )
            seconds = time.perf_counter() - started
            at_answer = work(url)
            end = await settle(url)
            after = await valid_latencies(client, 3, args.valid_steps)
    finally:
        server.stop()
    result = {
        "scenario": "deadline",
        "status": response.status_code,
        "answer_s": seconds,
        "deadline_s": args.deadline_s,
        "item_steps_before_answer": at_answer - start,
        "item_steps_after_answer": end - at_answer,
        "next_valid_p50_s": statistics.median(after),
    }
    print(f"deadline: steps=1000 num_images=8 answered {response.status_code} after "
          f"{seconds:.2f} s (deadline {args.deadline_s} s); item-steps before the answer "
          f"{at_answer - start:.0f}, after it {end - at_answer:.0f} (target 0); next valid "
          f"request p50 {result['next_valid_p50_s']:.3f} s")  # fmt: skip
    return result


SCENARIOS: dict[str, Callable[[argparse.Namespace], object]] = {
    "disconnect": disconnect_flood,
    "deadline": deadline,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenario", action="append", choices=sorted(SCENARIOS), help="repeatable; default all"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--disconnect-after", type=float, default=0.2)
    parser.add_argument("--heavy-steps", type=int, default=200)
    parser.add_argument("--valid", type=int, default=4, help="valid requests per phase")
    parser.add_argument("--valid-steps", type=int, default=10)
    parser.add_argument("--deadline-s", type=float, default=10.0)
    args = parser.parse_args()
    for name in args.scenario or list(SCENARIOS):
        result = asyncio.run(SCENARIOS[name](args))
        print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()

"""Fault floods against a real ``atelier serve`` on 127.0.0.1: what abandoned work, large
images and slow clients cost the service, and what a valid request sees meanwhile.

Each scenario starts its own server (``serve_process.Server``, CPU, real weights) and
measures it from outside: over HTTP, from ``/metrics`` and from ``/proc/<pid>``. Phases
with and without the fault alternate (in rounds) so a change in the machine's background
load hits both alike. Scenarios (``--scenario``, repeatable; default all, in this order):

``disconnect``
    A flood of clients that disconnect, on the real DiT. Each round: ``--valid`` valid
    requests (``steps=--valid-steps``, one image) one after the other, idle; then
    ``--clients`` clients send heavy requests (``steps=--heavy-steps``,
    ``num_images=8``) at once and disconnect after ``--disconnect-after`` s (the cancel
    point), and the same valid requests follow while the server drops the abandoned
    work. Work is read from ``atelier_work_units_total`` (item-steps started: sampler
    steps x images). Work for abandoned requests after the cancel point = the counter's
    growth from the cancel point until the server is idle, minus the valid requests'
    own work (exactly steps x images). Targets: none; every abandoned request logged
    499; valid requests served, p95 during the flood < 2x idle.

``deadline``
    One ``steps=1000, num_images=8`` request (within a raised ``max_image_steps``) that
    runs into ``--deadline-s``. Targets: 504 at the deadline, no work started after it.

``images``
    ``--flood`` concurrent stylize requests (real AdaIN, shipped settings) whose content
    is a ``--side`` x ``--side`` greyscale PNG of a few tens of kB (black with a grey
    line every 97 rows), at ``size=64``. Per round: the server's peak RSS growth during
    the flood (``VmHWM`` after resetting it through ``/proc/<pid>/clear_refs``, minus
    ``VmRSS`` before) and its CPU seconds per flood request (flood alone); then a valid
    small request (128 px content and style, ``size=128``) ``--probes`` times, idle and
    while a flood runs. The first round's growth is the one that counts (the server was
    warmed up with small requests only; later rounds reuse what the first left in the
    allocator). Targets: growth < 500 MB, < 1 s CPU per request, valid p95 < 2x idle.
    Reported beside it: the valid p95 while as many requests with a small content photo
    (``--side`` / 100 px, the same pattern) run, and the large flood's p95 over it, what
    the large uploads add to the work of their forwards.

``slow-clients``
    ``--slow-headers`` connections trickling an endless header line and
    ``--slow-bodies`` connections trickling a well-formed upload (one byte every 0.5 s)
    to a stylize server with the shipped timeouts (``header_timeout_s`` 10 s,
    ``body_timeout_s`` 30 s, then ``keep_alive_timeout_s`` 5 s); the valid request
    meanwhile. Targets: every slow connection closed by the server (within
    ``--slow-give-up-s``), valid p95 < 2x idle.

``job-loss``, ``async-flood``, ``queued-inputs``, ``event-streams``, ``result-reads``,
``queue-overhead``, ``previews``
    The job scenarios: see ``job_faults.py``.

``store-stall``, ``store-full``
    The job store stalled (Redis paused with SIGSTOP) and full (SQLite on a full tmpfs):
    see ``store_faults.py``.

``big-results``, ``big-results-redis``
    Prints of tens of MB painted, stored and read beside small jobs: see
    ``result_faults.py``.

Prints each scenario's figures and one JSON line (``RESULT {...}``), then one summary
table: each target, the measured figure, met or missed. Stops by itself; every server is
stopped with SIGTERM. Usage::

    ATELIER_WEIGHTS_DIR=../shared/weights PYTHONPATH=. .venv/bin/python \\
        benchmarks/service_faults.py [--scenario disconnect --scenario images ...]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import job_faults  # siblings: run as a script, this folder is on sys.path
import numpy as np
import result_faults
import store_faults
from PIL import Image
from scenario_flags import FlagGroup
from serve_process import Check, Footprint, Server, latency_check, p95, rss_mb


def metric(url: str, name: str, must_contain: str = "") -> float:
    """Sum of the samples of ``name`` in ``/metrics`` whose labels contain ``must_contain``."""
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


# ---------------------------------------------------------------------- generate
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


async def generate_latencies(client: httpx.AsyncClient, count: int, steps: int) -> list[float]:
    """``count`` valid generate requests one after the other: their latencies (s)."""
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


async def disconnect_flood(args: argparse.Namespace) -> tuple[dict, list[Check]]:
    heavy = {"prompt": "two red circles", "steps": args.heavy_steps, "num_images": 8}
    with Server(
        models="dit", weights_dir=args.weights_dir, queue_size=256, request_timeout_s=120.0
    ) as server:
        url = server.url
        async with httpx.AsyncClient(base_url=url, timeout=120.0) as client:
            await generate_latencies(client, 2, args.valid_steps)  # warm-up
            idle, flood, first_after_flood = [], [], []
            requested = before_cancel = after_cancel = closed = 0.0
            for _ in range(args.rounds):
                idle += await generate_latencies(client, args.valid, args.valid_steps)
                start = await settle(url)
                closed_before = metric(url, "atelier_http_requests_total", 'status="499"')
                leaving = [
                    post_and_leave(url, heavy, args.disconnect_after) for _ in range(args.clients)
                ]
                await asyncio.gather(*leaving)
                at_cancel = work(url)  # every client has left: the cancel point
                latencies = await generate_latencies(client, args.valid, args.valid_steps)
                first_after_flood.append(latencies[0])
                flood += latencies
                end = await settle(url)
                requested += args.clients * args.heavy_steps * 8
                before_cancel += at_cancel - start
                after_cancel += end - at_cancel - args.valid * args.valid_steps
                closed += metric(url, "atelier_http_requests_total", 'status="499"') - closed_before
        cancelled = {
            stage: metric(url, "atelier_cancelled_total", f'stage="{stage}"')
            for stage in ("queued", "running")
        }
    abandoned = args.rounds * args.clients
    others = [x for i, x in enumerate(flood) if i % args.valid]
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
        "valid_flood_others_p50_s": statistics.median(others) if others else None,
    }
    print(
        f"disconnect flood: {args.rounds} rounds x {args.clients} clients leaving after "
        f"{args.disconnect_after} s (steps={args.heavy_steps}, num_images=8 each)"
    )
    print(f"  item-steps requested by abandoned requests: {requested:.0f}")
    print(f"  computed before the cancel point:           {before_cancel:.0f}")
    print(f"  computed after the cancel point:            {after_cancel:.0f}  (target 0)")
    print(f"  requests logged as 499: {closed:.0f} of {abandoned}; items cancelled: {cancelled}")
    print(f"  valid request (steps={args.valid_steps}): idle p50 {result['valid_idle_p50_s']:.3f} s "
          f"p95 {result['valid_idle_p95_s']:.3f} s | flood p50 {result['valid_flood_p50_s']:.3f} s "
          f"p95 {result['valid_flood_p95_s']:.3f} s | p95 ratio {result['flood_over_idle_p95']:.2f} "
          "(target < 2)")  # fmt: skip
    print(f"  first valid request after each flood: "
          f"{', '.join(f'{x:.3f}' for x in first_after_flood)} s")  # fmt: skip
    checks = [
        Check(
            "disconnect",
            "item-steps for abandoned requests after the cancel point",
            f"{after_cancel:.0f} (before: {before_cancel:.0f} of {requested:.0f})",
            "0",
            after_cancel <= 0,
        ),
        Check(
            "disconnect",
            "abandoned requests logged 499",
            f"{closed:.0f} of {abandoned}",
            "all",
            closed == abandoned,
        ),  # fmt: skip
        latency_check("disconnect", "during the flood", idle, flood),
    ]
    return result, checks


async def deadline(args: argparse.Namespace) -> tuple[dict, list[Check]]:
    with Server(
        models="dit",
        weights_dir=args.weights_dir,
        request_timeout_s=args.deadline_s,
        settings={"max_image_steps": "8000"},
    ) as server:
        url = server.url
        async with httpx.AsyncClient(base_url=url, timeout=args.deadline_s + 60) as client:
            await generate_latencies(client, 1, args.valid_steps)
            start = await settle(url)
            started = time.perf_counter()
            response = await client.post(
                "/v1/generate", json={"prompt": "a red circle", "steps": 1000, "num_images": 8}
            )
            seconds = time.perf_counter() - started
            at_answer = work(url)
            end = await settle(url)
            after = await generate_latencies(client, 3, args.valid_steps)
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
    checks = [
        Check("deadline", "answer to steps=1000 x 8 images",
              f"{response.status_code} after {seconds:.2f} s",
              f"504 at the {args.deadline_s:g} s deadline", response.status_code == 504),
        Check("deadline", "item-steps started after the 504", f"{end - at_answer:.0f}", "0",
              end - at_answer <= 0),
    ]  # fmt: skip
    return result, checks


# ----------------------------------------------------------------------- stylize
def png_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def large_grey_png(side: int) -> bytes:
    pixels = np.zeros((side, side), np.uint8)
    pixels[::97] = 200
    return png_bytes(pixels)


def noise_png(side: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    return png_bytes(rng.integers(0, 256, (side, side, 3), dtype=np.uint8))


VALID_PAIR = (noise_png(128, 0), noise_png(128, 1))


async def stylize(client: httpx.AsyncClient, content: bytes, style: bytes, size: int) -> float:
    """One stylize request; its latency in seconds (raises on a non-200 answer)."""
    files = [("content", ("c.png", content, "image/png")), ("style", ("s.png", style, "image/png"))]
    started = time.perf_counter()
    response = await client.post("/v1/stylize", files=files, data={"size": str(size)})
    if response.status_code != 200:
        raise RuntimeError(f"{response.status_code}: {response.text[:200]}")
    return time.perf_counter() - started


async def stylize_latencies(client: httpx.AsyncClient, count: int) -> list[float]:
    """``count`` valid small stylize requests one after the other: their latencies (s)."""
    return [await stylize(client, *VALID_PAIR, 128) for _ in range(count)]


async def image_flood(client: httpx.AsyncClient, content: bytes, count: int) -> None:
    await asyncio.gather(*(stylize(client, content, VALID_PAIR[1], 64) for _ in range(count)))


async def image_round(
    url: str, pid: int, big: bytes, small: bytes, args: argparse.Namespace
) -> dict:
    async with httpx.AsyncClient(base_url=url, timeout=300.0) as client:
        idle = await stylize_latencies(client, args.probes)

        alone = Footprint(pid)
        await image_flood(client, big, args.flood)
        cpu_per_request = alone.cpu_s() / args.flood
        growth = alone.growth_mb()

        probed = Footprint(pid)
        flood = asyncio.create_task(image_flood(client, big, args.flood))
        loaded = await stylize_latencies(client, args.probes)
        await flood
        growth = max(growth, probed.growth_mb())

        control = asyncio.create_task(image_flood(client, small, args.flood))
        beside_small = await stylize_latencies(client, args.probes)
        await control
    return {
        "idle": idle,
        "loaded": loaded,
        "beside_small": beside_small,
        "peak_rss_growth_mb": growth,
        "cpu_s_per_flood_request": cpu_per_request,
        "rss_before_mb": alone.before_mb,
        "rss_after_mb": rss_mb(pid),
    }


async def images(args: argparse.Namespace) -> tuple[dict, list[Check]]:
    big, small = large_grey_png(args.side), large_grey_png(max(16, args.side // 100))
    print(f"large PNG: {args.side}x{args.side} greyscale, {len(big) / 1024:.1f} kB")
    with Server(
        models="adain", weights_dir=args.weights_dir, max_batch_wait_ms=10.0, queue_size=64
    ) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=300.0) as client:
            # the model's first forwards, no large image
            await asyncio.gather(*(stylize_latencies(client, 2) for _ in range(4)))
        rounds = [
            await image_round(server.url, server.pid, big, small, args) for _ in range(args.rounds)
        ]
    idle = [t for r in rounds for t in r["idle"]]
    loaded = [t for r in rounds for t in r["loaded"]]
    beside_small = [t for r in rounds for t in r["beside_small"]]
    growth = [round(r["peak_rss_growth_mb"], 1) for r in rounds]
    cpu = [round(r["cpu_s_per_flood_request"], 3) for r in rounds]
    result = {
        "scenario": "images",
        "flood": args.flood,
        "side": args.side,
        "png_kb": round(len(big) / 1024, 1),
        "peak_rss_growth_mb": growth,
        "cpu_s_per_flood_request": cpu,
        "rss_before_mb": [round(r["rss_before_mb"], 1) for r in rounds],
        "rss_after_mb": [round(r["rss_after_mb"], 1) for r in rounds],
        "valid_p95_idle_s": round(p95(idle), 3),
        "valid_p95_flood_s": round(p95(loaded), 3),
        "flood_over_idle_p95": round(p95(loaded) / p95(idle), 2),
        "valid_p95_small_flood_s": round(p95(beside_small), 3),
        "flood_over_small_flood_p95": round(p95(loaded) / p95(beside_small), 2),
    }
    print(f"peak RSS growth, {args.flood} concurrent requests (MB): {growth} (target < 500)")
    print(f"server CPU per flood request (s): {cpu} (target < 1)")
    print(f"server RSS before each round (MB): {result['rss_before_mb']}")
    print(f"server RSS after each round (MB): {result['rss_after_mb']}")
    print(
        f"valid request p95: idle {result['valid_p95_idle_s']} s, during the flood "
        f"{result['valid_p95_flood_s']} s: {result['flood_over_idle_p95']}x (target < 2x)"
    )
    print(
        f"valid request p95 beside as many small uploads {result['valid_p95_small_flood_s']} s: "
        f"the large flood over it {result['flood_over_small_flood_p95']}x"
    )
    flood = f"{args.flood} x {args.side}x{args.side} grey PNG"
    checks = [
        Check("images", f"peak RSS growth, {flood} (first round)",
              f"{growth[0]:.0f} MB (rounds: {growth})", "< 500 MB", growth[0] < 500),
        Check("images", "server CPU per flood request", f"{max(cpu):.2f} s (rounds: {cpu})",
              "< 1 s", max(cpu) < 1.0),
        latency_check("images", "during the flood", idle, loaded),
        Check("images", "valid request p95, large-image flood / as many small uploads",
              f"{p95(loaded):.3f} s / {p95(beside_small):.3f} s = "
              f"{p95(loaded) / p95(beside_small):.2f}x", "reported", True),
    ]  # fmt: skip
    return result, checks


# ------------------------------------------------------------------ slow clients
async def slow_client(port: int, head: bytes, trickle: bytes, give_up_s: float) -> dict:
    """Send ``head`` then ``trickle`` one byte every 0.5 s until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()

    async def send() -> None:
        writer.write(head)
        for byte in trickle:
            await writer.drain()
            await asyncio.sleep(0.5)
            writer.write(bytes([byte]))

    sender = asyncio.create_task(send())
    try:
        answer = await asyncio.wait_for(reader.read(), timeout=give_up_s)
        closed_after = time.monotonic() - started
    except TimeoutError:
        answer, closed_after = b"", None
    finally:
        sender.cancel()
        writer.close()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else None
    return {"closed_after_s": closed_after, "status": status}


def _closed_summary(group: list[dict]) -> dict:
    closed = [o["closed_after_s"] for o in group if o["closed_after_s"] is not None]
    return {
        "closed": len(closed),
        "of": len(group),
        "statuses": sorted({o["status"] for o in group}, key=str),
        "closed_after_s_max": round(max(closed), 2) if closed else None,
    }


async def slow_clients(args: argparse.Namespace) -> tuple[dict, list[Check]]:
    header = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    body_head = (  # a well-formed upload whose file part never ends
        b"POST /v1/stylize HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: multipart/form-data; boundary=x\r\nContent-Length: 100000\r\n\r\n"
        b'--x\r\nContent-Disposition: form-data; name="content"; filename="c.png"\r\n'
        b"Content-Type: image/png\r\n\r\n"
    )
    with Server(
        models="adain", weights_dir=args.weights_dir, max_batch_wait_ms=10.0, queue_size=64
    ) as server:
        give_up = args.slow_give_up_s
        tasks = [
            slow_client(server.port, header, b"a" * 1000, give_up) for _ in range(args.slow_headers)
        ] + [
            slow_client(server.port, body_head, b"b" * 1000, give_up)
            for _ in range(args.slow_bodies)
        ]
        async with httpx.AsyncClient(base_url=server.url, timeout=300.0) as client:
            await stylize_latencies(client, 2)  # warm-up
            idle = await stylize_latencies(client, args.probes)
            slow = asyncio.gather(*tasks)
            await asyncio.sleep(1.0)  # the slow connections are open
            loaded = await stylize_latencies(client, args.probes)
            outcomes = await slow
    headers = _closed_summary(outcomes[: args.slow_headers])
    bodies = _closed_summary(outcomes[args.slow_headers :])
    result = {
        "scenario": "slow-clients",
        "slow_headers": headers,
        "slow_bodies": bodies,
        "valid_p95_idle_s": round(p95(idle), 3),
        "valid_p95_slow_clients_s": round(p95(loaded), 3),
        "slow_over_idle_p95": round(p95(loaded) / p95(idle), 2),
    }
    print(f"slow-header connections: {headers}")
    print(f"slow-body connections:   {bodies}")
    print(
        f"valid request p95: idle {result['valid_p95_idle_s']} s, with slow clients "
        f"{result['valid_p95_slow_clients_s']} s: {result['slow_over_idle_p95']}x"
    )

    def closed_check(kind: str, summary: dict) -> Check:
        return Check(
            "slow-clients",
            f"slow-{kind} connections closed by the server",
            f"{summary['closed']} of {summary['of']}, last after "
            f"{summary['closed_after_s_max']} s, answers {summary['statuses']}",
            f"all, within {give_up:g} s",
            summary["closed"] == summary["of"],
        )

    checks = [
        closed_check("header", headers),
        closed_check("body", bodies),
        latency_check("slow-clients", "with slow clients", idle, loaded),
    ]
    return result, checks


SCENARIOS: dict[str, Callable[[argparse.Namespace], object]] = {
    "disconnect": disconnect_flood,
    "deadline": deadline,
    "images": images,
    "slow-clients": slow_clients,
    **job_faults.SCENARIOS,
    **store_faults.SCENARIOS,
    **result_faults.SCENARIOS,
}


FLAG_GROUPS = (
    FlagGroup(
        "disconnect and deadline",
        {
            "--rounds": (3, "rounds of every flood scenario"),
            "--clients": (20, None),
            "--disconnect-after": (0.2, None),
            "--heavy-steps": (200, None),
            "--valid": (4, "valid requests per phase"),
            "--valid-steps": (10, None),
            "--deadline-s": (10.0, None),
        },
    ),
    FlagGroup(
        "images and slow-clients",
        {
            "--flood": (8, "concurrent large-image requests"),
            "--side": (6300, "side of the large PNG"),
            "--probes": (5, "valid requests per phase"),
            "--slow-headers": (50, None),
            "--slow-bodies": (10, None),
            "--slow-give-up-s": (60.0, None),
        },
    ),
    job_faults.FLAGS,
    store_faults.FLAGS,
)


def print_summary(checks: list[Check]) -> None:
    rows = [("scenario", "figure", "measured", "target", "result")] + [
        (c.scenario, c.figure, c.measured, c.target, "met" if c.met else "MISSED") for c in checks
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    print("\nsummary")
    for row in rows:
        print(
            "  "
            + " | ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True))
            + " | "
            + row[4]
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenario", action="append", choices=list(SCENARIOS), help="repeatable; default all"
    )
    parser.add_argument("--weights-dir", type=Path, default=os.environ.get("ATELIER_WEIGHTS_DIR"))
    for flags in FLAG_GROUPS:
        flags.add_to(parser)
    args = parser.parse_args()
    names = args.scenario or list(SCENARIOS)
    if args.weights_dir is None and set(names) - {"disconnect", "deadline"}:
        parser.error("the VGG weights are needed: set ATELIER_WEIGHTS_DIR or --weights-dir")

    checks: list[Check] = []
    for name in names:
        result, scenario_checks = asyncio.run(SCENARIOS[name](args))
        print("RESULT " + json.dumps(result))
        checks += scenario_checks
    print_summary(checks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

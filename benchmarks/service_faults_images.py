"""Fault floods against a real ``atelier serve`` on 127.0.0.1: large images, slow clients.

One server (the real AdaIN on the CPU, shipped settings) runs in a subprocess; this
script measures it from outside, with the figures read from ``/proc/<pid>``:

1. **Large-image flood.** ``--flood`` concurrent stylize requests whose content is a
   ``--side`` x ``--side`` greyscale PNG of a few tens of kB (black with a grey line
   every 97 rows: it compresses ~1000:1), at ``size=64``. Reported per round:
   the server's peak RSS growth during the flood (``VmHWM`` after resetting it through
   ``/proc/<pid>/clear_refs``, minus ``VmRSS`` before), its CPU seconds per flood
   request (flood alone), and its RSS before and after. The first round's growth is
   the one that counts (the server was warmed up with small requests only); later
   rounds reuse the memory the first one left in the allocator (``atelier serve``
   tunes glibc malloc to keep freed blocks). Targets: growth < 500 MB, < 1 s CPU per
   request.
2. **Latency under the flood.** A valid small request (128 px content and style,
   ``size=128``) sent ``--probes`` times one after another: idle, then while a flood
   runs; rounds alternate the two so background load hits both alike. Target: p95
   under the flood < 2x the idle p95.
3. **Slow clients.** ``--slow-headers`` connections trickling an endless header line
   and ``--slow-bodies`` connections trickling a body (one byte every 0.5 s), with
   the valid request's latency meanwhile; reported: how many were closed by the server
   and when (the shipped ``header_timeout_s`` = 10 s; ``body_timeout_s`` = 30 s, then
   ``keep_alive_timeout_s`` = 5 s for a client still sending after its 408).

Prints a table and one ``RESULT {...}`` JSON line. Usage::

    ATELIER_WEIGHTS_DIR=../shared/weights PYTHONPATH=. .venv/bin/python \\
        benchmarks/service_faults_images.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import time
from pathlib import Path

import httpx
import numpy as np
from PIL import Image
from service_load import Server  # a sibling: run as a script, its folder is on sys.path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ the process
def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmRSS") / 1024


def peak_rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmHWM") / 1024


def reset_peak_rss(pid: int) -> None:
    """Linux >= 4.0: writing 5 to ``clear_refs`` resets ``VmHWM`` to the current RSS."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


# ------------------------------------------------------------------- the inputs
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


# ----------------------------------------------------------------- the requests
async def stylize(client: httpx.AsyncClient, content: bytes, style: bytes, size: int) -> float:
    """One stylize request; its latency in seconds (raises on a non-200 answer)."""
    files = [("content", ("c.png", content, "image/png")), ("style", ("s.png", style, "image/png"))]
    started = time.perf_counter()
    response = await client.post("/v1/stylize", files=files, data={"size": str(size)})
    if response.status_code != 200:
        raise RuntimeError(f"{response.status_code}: {response.text[:200]}")
    return time.perf_counter() - started


async def probes(client, valid, count: int) -> list[float]:
    return [await stylize(client, *valid, 128) for _ in range(count)]


async def flood(client, big: bytes, style: bytes, count: int) -> None:
    await asyncio.gather(*(stylize(client, big, style, 64) for _ in range(count)))


async def warm_up(url: str, valid) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=300.0) as client:
        await asyncio.gather(*(probes(client, valid, 2) for _ in range(4)))


async def image_round(url, pid, big, valid, args) -> dict:
    async with httpx.AsyncClient(base_url=url, timeout=300.0) as client:
        idle = await probes(client, valid, args.probes)

        rss_before = rss_mb(pid)
        reset_peak_rss(pid)
        cpu_before = cpu_seconds(pid)
        await flood(client, big, valid[1], args.flood)
        cpu_per_request = (cpu_seconds(pid) - cpu_before) / args.flood
        growth = peak_rss_mb(pid) - rss_before

        reset_peak_rss(pid)
        rss_before_loaded = rss_mb(pid)
        flood_task = asyncio.create_task(flood(client, big, valid[1], args.flood))
        loaded = await probes(client, valid, args.probes)
        await flood_task
        growth = max(growth, peak_rss_mb(pid) - rss_before_loaded)
    return {
        "idle": idle,
        "loaded": loaded,
        "peak_rss_growth_mb": growth,
        "cpu_s_per_flood_request": cpu_per_request,
        "rss_before_mb": rss_before,
        "rss_after_mb": rss_mb(pid),
    }


# ----------------------------------------------------------------- slow clients
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


async def slow_clients(url: str, port: int, valid, args) -> dict:
    header = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    body_head = (  # a well-formed upload whose file part never ends
        b"POST /v1/stylize HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: multipart/form-data; boundary=x\r\nContent-Length: 100000\r\n\r\n"
        b'--x\r\nContent-Disposition: form-data; name="content"; filename="c.png"\r\n'
        b"Content-Type: image/png\r\n\r\n"
    )
    give_up = args.slow_give_up_s
    tasks = [slow_client(port, header, b"a" * 1000, give_up) for _ in range(args.slow_headers)]
    tasks += [slow_client(port, body_head, b"b" * 1000, give_up) for _ in range(args.slow_bodies)]
    async with httpx.AsyncClient(base_url=url, timeout=300.0) as client:
        idle = await probes(client, valid, args.probes)
        slow = asyncio.gather(*tasks)
        await asyncio.sleep(1.0)  # the slow connections are open
        loaded = await probes(client, valid, args.probes)
        outcomes = await slow
    headers, bodies = outcomes[: args.slow_headers], outcomes[args.slow_headers :]

    def summary(group: list[dict]) -> dict:
        closed = [o["closed_after_s"] for o in group if o["closed_after_s"] is not None]
        return {
            "closed": len(closed),
            "of": len(group),
            "statuses": sorted({o["status"] for o in group}, key=str),
            "closed_after_s_max": round(max(closed), 2) if closed else None,
        }

    return {"headers": summary(headers), "bodies": summary(bodies), "idle": idle, "loaded": loaded}


def p95(values: list[float]) -> float:
    return float(np.percentile(values, 95))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights-dir", type=Path, default=os.environ.get("ATELIER_WEIGHTS_DIR"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flood", type=int, default=8, help="concurrent large-image requests")
    parser.add_argument("--side", type=int, default=6300, help="side of the large PNG")
    parser.add_argument("--probes", type=int, default=5, help="valid requests per phase")
    parser.add_argument("--slow-headers", type=int, default=50)
    parser.add_argument("--slow-bodies", type=int, default=10)
    parser.add_argument("--slow-give-up-s", type=float, default=60.0)
    args = parser.parse_args()
    if args.weights_dir is None:
        parser.error("set ATELIER_WEIGHTS_DIR or --weights-dir")

    big = large_grey_png(args.side)
    valid = (noise_png(128, 0), noise_png(128, 1))
    print(f"large PNG: {args.side}x{args.side} greyscale, {len(big) / 1024:.1f} kB")
    server = Server(args.weights_dir, batch_size=8, wait_ms=10.0, queue=64)
    try:
        server.wait_ready()
        pid = server.process.pid
        asyncio.run(warm_up(server.url, valid))  # the model's first forwards, no large image
        rounds = [
            asyncio.run(image_round(server.url, pid, big, valid, args)) for _ in range(args.rounds)
        ]
        slow = asyncio.run(slow_clients(server.url, server.port, valid, args))
    finally:
        server.stop()

    idle = [t for r in rounds for t in r["idle"]]
    loaded = [t for r in rounds for t in r["loaded"]]
    result = {
        "flood": args.flood,
        "side": args.side,
        "png_kb": round(len(big) / 1024, 1),
        "peak_rss_growth_mb": [round(r["peak_rss_growth_mb"], 1) for r in rounds],
        "cpu_s_per_flood_request": [round(r["cpu_s_per_flood_request"], 3) for r in rounds],
        "rss_before_mb": [round(r["rss_before_mb"], 1) for r in rounds],
        "rss_after_mb": [round(r["rss_after_mb"], 1) for r in rounds],
        "valid_p95_idle_s": round(p95(idle), 3),
        "valid_p95_flood_s": round(p95(loaded), 3),
        "flood_over_idle_p95": round(p95(loaded) / p95(idle), 2),
        "slow_headers": slow["headers"],
        "slow_bodies": slow["bodies"],
        "valid_p95_idle_s_slow_phase": round(p95(slow["idle"]), 3),
        "valid_p95_slow_clients_s": round(p95(slow["loaded"]), 3),
        "slow_over_idle_p95": round(p95(slow["loaded"]) / p95(slow["idle"]), 2),
    }
    print(
        f"peak RSS growth, {args.flood} concurrent requests (MB): {result['peak_rss_growth_mb']} (target < 500)"
    )
    print(f"server CPU per flood request (s): {result['cpu_s_per_flood_request']} (target < 1)")
    print(f"server RSS before each round (MB): {result['rss_before_mb']}")
    print(f"server RSS after each round (MB): {result['rss_after_mb']}")
    print(
        f"valid request p95: idle {result['valid_p95_idle_s']} s, during the flood "
        f"{result['valid_p95_flood_s']} s: {result['flood_over_idle_p95']}x (target < 2x)"
    )
    print(f"slow-header connections: {slow['headers']}")
    print(f"slow-body connections:   {slow['bodies']}")
    print(
        f"valid request p95: idle {result['valid_p95_idle_s_slow_phase']} s, with slow clients "
        f"{result['valid_p95_slow_clients_s']} s: {result['slow_over_idle_p95']}x"
    )
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

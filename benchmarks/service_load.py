"""Load test of ``POST /v1/stylize``: dynamic batching on vs off, and HTTP overhead.

Everything is measured side by side in one run on this machine. One ``atelier serve``
subprocess per max batch size (default 1 and 8) runs on 127.0.0.1, all started before
measuring, and the real ``StyleTransfer`` is loaded in this process too. Only one of
them works at a time, and the measurements alternate between them so that a change in
the machine's background load hits every configuration alike (the machine is shared):

0. the model alone: seconds per image at each batch size, in this process (the most
   that batching can give the service);
1. HTTP overhead: pairs of (one direct in-process ``stylize`` call on the decoded 256 px
   tensors, one HTTP request with the same PNGs to the batch-1 server), alternated;
   overhead = median HTTP latency / median direct time - 1 (upload, multipart parse,
   decode, queue hop, PNG encode, response);
2. load: rounds of N concurrent httpx clients in a closed loop (each sends its next
   request when its previous answer arrives), each round on every server in turn;
   throughput (answers / summed wall time) and p50/p95/p99 latency, errors counted.

Prints a table and one JSON line (``RESULT {...}``). Needs the VGG weights
(``ATELIER_WEIGHTS_DIR`` or ``--weights-dir``). Usage::

    ATELIER_WEIGHTS_DIR=../shared/weights .venv/bin/python benchmarks/service_load.py \\
        --clients 16 --requests-per-client 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import torch
from serve_process import Server  # a sibling: run as a script, its folder is on sys.path

from models.images import encode_image, load_image
from service.cli.serve import tune_glibc_malloc
from service.images import ImageLimits, decode_image

ROOT = Path(__file__).resolve().parent.parent

SHARED_IMAGES = ROOT.parent / "shared" / "images"


def _load_png(path: Path | None, size: int, seed: int) -> bytes:
    """A ``size``-px PNG: the given image shrunk, or a smooth random pattern."""
    if path is not None and path.is_file():
        image = load_image(path, max_side=size)[0]
    else:
        generator = torch.Generator().manual_seed(seed)
        image = torch.nn.functional.interpolate(
            torch.rand(1, 3, 16, 16, generator=generator), size=(size, size), mode="bicubic"
        )[0].clamp(0, 1)
    return encode_image(image, "png")[0]


class DirectModel:
    """The real ``StyleTransfer`` in this process, called as the server's worker calls it.

    Same tensors the server decodes, same allocator tuning, a worker thread under
    ``torch.inference_mode()``: the difference to an HTTP request is then the HTTP path.
    """

    def __init__(self, weights_dir: Path, content: bytes, style: bytes):
        from models.adain import StyleTransfer

        self.model = StyleTransfer.from_pretrained([weights_dir], device="cpu", fast=True)
        limits = ImageLimits(max_pixels=10**8)
        self.content = decode_image(content, limits)[None] / 255.0
        self.style = decode_image(style, limits)[None] / 255.0
        self.worker = ThreadPoolExecutor(max_workers=1)
        for _ in range(3):
            self.seconds()  # warm-up

    def _call(self, batch: int) -> float:
        content = self.content.expand(batch, -1, -1, -1).contiguous()
        with torch.inference_mode():
            started = time.perf_counter()
            self.model.stylize(content, [self.style])
            return time.perf_counter() - started

    def seconds(self, batch: int = 1) -> float:
        """Wall time of one ``stylize`` call on ``batch`` copies of the content."""
        return self.worker.submit(self._call, batch).result()


async def run_load(
    url: str, content: bytes, style: bytes, clients: int, per_client: int, size: int
) -> dict:
    """Closed-loop load: ``clients`` workers each send ``per_client`` requests in turn."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    files = [("content", ("c.png", content, "image/png")), ("style", ("s.png", style, "image/png"))]
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(base_url=url, timeout=600.0, limits=limits) as client:

        async def worker() -> None:
            for _ in range(per_client):
                started = time.perf_counter()
                try:
                    response = await client.post(
                        "/v1/stylize", files=files, data={"size": str(size)}
                    )
                    status = str(response.status_code)
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                if status == "200":
                    latencies.append(time.perf_counter() - started)
                else:
                    errors[status] = errors.get(status, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - started

    return summarize(latencies, errors, wall, clients, clients * per_client)


def merge(rows: list[dict]) -> dict:
    """Pool several load runs: totals and throughput over the summed wall time."""
    latencies = [lat for row in rows for lat in row["latencies"]]
    errors: dict[str, int] = {}
    for row in rows:
        for status, count in row["errors"].items():
            errors[status] = errors.get(status, 0) + count
    wall = sum(row["wall_s"] for row in rows)
    return summarize(latencies, errors, wall, rows[0]["clients"], sum(r["requests"] for r in rows))


def summarize(latencies, errors, wall, clients, requests) -> dict:
    lat = np.array(latencies) if latencies else np.array([float("nan")])
    return {
        "clients": clients,
        "requests": requests,
        "ok": len(latencies),
        "errors": errors,
        "wall_s": round(wall, 3),
        "throughput_rps": round(len(latencies) / wall, 4),
        "p50_s": round(float(np.percentile(lat, 50)), 3),
        "p95_s": round(float(np.percentile(lat, 95)), 3),
        "p99_s": round(float(np.percentile(lat, 99)), 3),
        "latencies": [round(x, 4) for x in latencies],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights-dir", type=Path, default=os.environ.get("ATELIER_WEIGHTS_DIR"))
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests-per-client", type=int, default=3)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--batch-wait-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=2, help="load runs per server, alternated")
    parser.add_argument("--single-client-requests", type=int, default=8)
    parser.add_argument("--content", type=Path, default=SHARED_IMAGES / "content" / "chelsea.png")
    parser.add_argument("--style", type=Path, default=SHARED_IMAGES / "style" / "udnie.jpg")
    args = parser.parse_args()
    if args.weights_dir is None or not Path(args.weights_dir).is_dir():
        parser.error("the VGG weights are needed: set ATELIER_WEIGHTS_DIR or --weights-dir")
    weights_dir = Path(args.weights_dir).resolve()
    content = _load_png(args.content, args.size, seed=0)
    style = _load_png(args.style, args.size, seed=1)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    print(f"torch threads: {torch.get_num_threads()}, cpus: {os.cpu_count()}, size {args.size}px")

    print(f"glibc malloc tuned as in `atelier serve`: {tune_glibc_malloc()}")
    direct = DirectModel(weights_dir, content, style)
    servers = {
        b: Server(
            models="adain",
            weights_dir=weights_dir,
            max_batch_size=b,
            max_batch_wait_ms=args.batch_wait_ms,
            queue_size=4 * args.clients,
        )
        for b in batch_sizes
    }
    runs: dict[int, list[dict]] = {b: [] for b in batch_sizes}
    pairs: list[tuple[float, float]] = []
    # The ceiling batching can reach: the model's own seconds per image by batch size.
    per_image: dict[int, list[float]] = {b: [] for b in batch_sizes}
    for b in batch_sizes:
        direct.seconds(b)  # warm-up: the first call at a new batch shape is slower
    for _ in range(3):
        for b in batch_sizes:
            per_image[b].append(direct.seconds(b) / b)
    model_alone = {str(b): round(statistics.median(v), 4) for b, v in per_image.items()}
    print(f"model alone, seconds per image by batch size: {model_alone}")
    try:
        for server in servers.values():
            server.wait_ready()
            for _ in range(2):  # warm-up, both batch shapes the load will use
                asyncio.run(run_load(server.url, content, style, 8, 1, args.size))
        # HTTP overhead: direct call and one HTTP request, alternated so drift hits both.
        reference = servers[min(batch_sizes)]
        for _ in range(args.single_client_requests):
            direct_s = direct.seconds()
            one = asyncio.run(run_load(reference.url, content, style, 1, 1, args.size))
            pairs.append((direct_s, one["p50_s"]))
        # Load: rounds alternate between the servers (only one is busy at a time).
        for _ in range(args.rounds):
            for batch_size in batch_sizes:
                runs[batch_size].append(
                    asyncio.run(
                        run_load(
                            servers[batch_size].url,
                            content,
                            style,
                            args.clients,
                            args.requests_per_client,
                            args.size,
                        )
                    )
                )
    finally:
        for server in servers.values():
            server.stop()

    results = {
        str(b): {k: v for k, v in merge(rows).items() if k != "latencies"}
        for b, rows in runs.items()
    }
    for batch_size in batch_sizes:
        row = results[str(batch_size)]
        print(
            f"max batch {batch_size:>2}, {args.clients} clients: "
            f"{row['throughput_rps']:.3f} req/s, "
            f"p50 {row['p50_s']:.2f} s, p95 {row['p95_s']:.2f} s, p99 {row['p99_s']:.2f} s, "
            f"ok {row['ok']}/{row['requests']}, errors {row['errors'] or 'none'}"
        )
    direct_s = statistics.median(d for d, _ in pairs)
    http_s = statistics.median(h for _, h in pairs)

    summary: dict = {"size": args.size, "clients": args.clients, "load": results}
    if len(batch_sizes) > 1:
        smallest, largest = str(min(batch_sizes)), str(max(batch_sizes))
        ratio = results[largest]["throughput_rps"] / results[smallest]["throughput_rps"]
        summary["throughput_ratio"] = round(ratio, 3)
        ceiling = model_alone[smallest] / model_alone[largest]
        summary["model_alone_s_per_image"] = model_alone
        summary["model_alone_ratio"] = round(ceiling, 3)
        print(f"throughput ratio batch {largest} / batch {smallest}: {ratio:.2f}x (target >= 1.5x)")
        print(f"the model alone, batch {largest} vs {smallest} images per second: {ceiling:.2f}x")
    overhead = http_s / direct_s - 1.0
    summary.update(direct_s=round(direct_s, 4), http_s=round(http_s, 4))
    summary["http_overhead"] = round(overhead, 4)
    print(
        f"one request at a time: HTTP median {http_s:.3f} s vs direct call {direct_s:.3f} s "
        f"({len(pairs)} alternated pairs): overhead {overhead * 100:+.1f}% (target < 10%)"
    )
    print("RESULT " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

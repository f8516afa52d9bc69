"""Prints taking turns: ``--count`` print jobs submitted at once to one real ``atelier
serve`` (CPU, the real AdaIN), once for each ``--bulk-slots`` value of
``ATELIER_BULK_JOBS_PER_DEVICE`` (each on a fresh server, in turn, in one run).

For each value it prints when each print finished (seconds from the first submit), the
time to the last, and the server's peak RSS growth from before the submits: what a
replica's memory must hold, and what a bulk slot costs the first client and the batch.
``--count`` is the old behaviour's concurrency when it is at most ``max_batch_size``
(8): before prints were bulk jobs, a replica claimed that many at once.

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/print_turns.py
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/print_turns.py \\
        --count 4 --side 8192 --aspect 1.0 --bulk-slots 1 2 4
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

import httpx
from job_faults import ASYNC, _finished
from result_faults import _noise_png, smooth_photo
from serve_process import Footprint, Server


async def _turns(server: Server, photo: bytes, count: int, side: int) -> tuple[list[float], float]:
    """Each print's seconds from the first submit to ``succeeded``, and the peak RSS
    growth (MB) over the whole run."""
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        footprint = Footprint(server.pid)
        started = time.monotonic()
        ids = []
        for index in range(count):
            files = [("content", ("p.jpg", photo)), ("style", ("s.png", _noise_png(64, 9)))]
            data = {"size": str(side), "seed": str(index)}
            response = await client.post("/v1/stylize", files=files, data=data, headers=ASYNC)
            response.raise_for_status()
            ids.append(response.json()["id"])
        done: list[float] = []

        async def follow(job_id: str) -> None:
            final = await _finished(client, job_id, limit_s=7200)
            if final["state"] != "succeeded":
                raise RuntimeError(f"print {job_id} {final['state']}: {final.get('error')}")
            done.append(time.monotonic() - started)

        await asyncio.gather(*(follow(job_id) for job_id in ids))
        return sorted(done), footprint.growth_mb()


async def main(args: argparse.Namespace) -> None:
    photo = smooth_photo(args.side, seed=3, aspect=args.aspect)
    print(f"{args.count} prints of {args.side} px (aspect {args.aspect}), submitted at once")
    print("bulk slots | each print done (s)               | last (s) | peak RSS growth (MB)")
    for slots in args.bulk_slots:
        settings = {
            "max_side": str(args.side),
            "bulk_jobs_per_device": str(slots),
            "job_results_max_bytes": str(args.count * 200 * 2**20),
            "job_timeout_s": "7200",
        }
        with Server(models="adain", weights_dir=args.weights_dir, settings=settings) as server:
            done, growth = await _turns(server, photo, args.count, args.side)
        shown = ", ".join(f"{seconds:.0f}" for seconds in done)
        print(f"{slots:>10} | {shown:<33} | {done[-1]:>8.0f} | {growth:>8.0f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=4, help="prints submitted at once")
    parser.add_argument("--side", type=int, default=8192, help="the prints' longer side")
    parser.add_argument("--aspect", type=float, default=1.0, help="shorter side over longer")
    parser.add_argument("--bulk-slots", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument(
        "--weights-dir", type=Path, default=os.environ.get("ATELIER_WEIGHTS_DIR") or None
    )
    asyncio.run(main(parser.parse_args()))

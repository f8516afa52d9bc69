"""Where several prints' memory meets: ``--prints`` print jobs submitted one after another
(each submit waits for its 202, not for the print) to a real ``atelier serve`` (CPU, the
real AdaIN), and the server's RSS sampled every 50 ms until the last one is stored.

It prints, second by second, the highest RSS growth over the RSS before the first
submit, and what was happening then: which uploads were being sent (and so decoded in
the request), and the progress of each job that was running (its step, of its steps;
the last step is its encode and store). Then the highest second overall, and after the
last submit's 202. ``benchmarks/print_memory.py`` gives one print's stages alone; this
shows which two of them fall together when prints queue up (the ``big-results``
scenario of ``service_faults.py`` submits four at once).

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/print_overlap.py [--prints 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from pathlib import Path

import httpx
from job_faults import ASYNC
from result_faults import _noise_png, smooth_photo
from serve_process import Server, rss_mb

#: Seconds between two reads of the server's RSS, and between two rounds of job polls.
SAMPLE_S, POLL_S = 0.05, 0.2


def _sample(pid: int, stop: threading.Event, samples: list[tuple[float, float]]) -> None:
    while not stop.is_set():
        samples.append((time.monotonic(), rss_mb(pid)))
        time.sleep(SAMPLE_S)


async def run(server: Server, photo: bytes, side: int, prints: int) -> None:
    before = rss_mb(server.pid)
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(server.pid, stop, samples))
    sampler.start()
    started = time.monotonic()
    uploads: list[tuple[float, float]] = []
    progress: list[tuple[float, int, int, int]] = []  # (time, job, step, steps)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
            ids: list[str] = []
            submitting = asyncio.create_task(
                _submit(client, photo, side, prints, ids, uploads, started)
            )
            finished: set[str] = set()
            while not submitting.done() or len(finished) < len(ids):
                for number, job_id in enumerate(list(ids)):
                    if job_id in finished:
                        continue
                    body = (await client.get(f"/v1/jobs/{job_id}")).json()
                    if body["state"] in ("succeeded", "failed", "cancelled"):
                        if body["state"] != "succeeded":
                            raise RuntimeError(f"print {number} {body['state']}: {body['error']}")
                        finished.add(job_id)
                    elif body["state"] == "running" and body.get("progress"):
                        done = body["progress"]
                        when = time.monotonic() - started
                        progress.append((when, number, done["step"], done["total"]))
                await asyncio.sleep(POLL_S)
            await submitting
    finally:
        stop.set()
        sampler.join()
    _report(samples, started, before, uploads, progress)


async def _submit(
    client: httpx.AsyncClient,
    photo: bytes,
    side: int,
    prints: int,
    ids: list[str],
    uploads: list[tuple[float, float]],
    started: float,
) -> None:
    """The prints, one after another (each waits for its 202): ``ids`` and ``uploads``
    (each upload's seconds from ``started`` to its send and to its answer) grow."""
    for index in range(prints):
        sent = time.monotonic()
        files = [("content", ("p.jpg", photo)), ("style", ("s.png", _noise_png(64, 9)))]
        data = {"size": str(side), "seed": str(index)}
        response = await client.post("/v1/stylize", files=files, data=data, headers=ASYNC)
        response.raise_for_status()
        uploads.append((sent - started, time.monotonic() - started))
        ids.append(response.json()["id"])


def _report(
    samples: list[tuple[float, float]],
    started: float,
    before: float,
    uploads: list[tuple[float, float]],
    progress: list[tuple[float, int, int, int]],
) -> None:
    highest: dict[int, float] = {}
    for when, rss in samples:
        second = int(when - started)
        highest[second] = max(highest.get(second, 0.0), rss - before)
    print("second | RSS growth (MB) | uploads sent | jobs running: step/steps")
    for second in sorted(highest):
        sending = [str(n) for n, (a, b) in enumerate(uploads) if a < second + 1 and b > second]
        latest: dict[int, str] = {}
        for when, number, step, steps in progress:
            if second <= when < second + 1:
                latest[number] = f"job {number}: {step}/{steps}"
        print(
            f"{second:6d} | {highest[second]:15.0f} | {','.join(sending) or '-':>12} | "
            f"{'  '.join(latest[n] for n in sorted(latest))}"
        )
    last_upload = int(uploads[-1][1]) if uploads else 0
    after = [mb for second, mb in highest.items() if second > last_upload]
    print(
        f"the highest: {max(highest.values()):.0f} MB; after the last 202: {max(after, default=0):.0f} MB"
    )


async def main(args: argparse.Namespace) -> None:
    photo = smooth_photo(args.side, seed=3, aspect=1.0)
    budget = str(args.prints * 200 * 2**20)
    settings = {
        "max_side": str(args.side),
        "job_results_max_bytes": budget,
        "job_inputs_max_bytes": budget,
        "job_timeout_s": "7200",
    }
    with Server(models="adain", weights_dir=args.weights_dir, settings=settings) as server:
        await run(server, photo, args.side, args.prints)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, default=8192, help="the prints' side (square)")
    parser.add_argument("--prints", type=int, default=4, help="prints submitted one after another")
    parser.add_argument(
        "--weights-dir", type=Path, default=os.environ.get("ATELIER_WEIGHTS_DIR") or None
    )
    asyncio.run(main(parser.parse_args()))

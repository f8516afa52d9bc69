"""Where a print's memory goes: one print job on a real ``atelier serve`` (CPU, the real
AdaIN), the server's peak RSS growth stage by stage of the job.

The stages follow the job's progress (``GET /v1/jobs/{id}`` polled every 50 ms; a
print's steps are the base, then each octave's statistics and tiles): the upload (the
request: the photo checked, at 1/8 scale for a JPEG, and stored as uploaded), the photo
decoded by the worker with the plan and the base, each octave, then the encode and the
store. At each change
of stage the peak RSS (``VmHWM``) is read and reset, so each row is that stage's own
peak over the server's RSS before the submit; the progress is reported after a group of
steps, so a boundary may be off by a step or two. Then the print's thumbnail, as a
gallery asks for it (``GET /v1/jobs/{id}/thumbnail``). Last: the RSS once the job is stored,
and where it is (``/proc/PID/smaps_rollup``: anonymous memory, or pages of mapped files).
With ``--prints N`` the same print is painted N times, one after another, each measured
over the RSS before the first: what one print leaves behind, and whether the next one's
stages add to it.

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/print_memory.py --side 8192
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

import httpx
from job_faults import ASYNC
from result_faults import _noise_png, smooth_photo
from serve_process import Server, peak_rss_mb, reset_peak_rss, rss_mb

from models.adain.large import TILE_SIDE
from models.adain.presets import BASE_SIDE, octave_sizes
from models.images import fit_longer_side


def stage_bounds(side: int, aspect: float) -> list[tuple[int, str]]:
    """``(first step, name)`` of each stage: ``step`` is the job's progress (steps done)."""
    width, height = fit_longer_side(side, round(side * aspect), side)
    bounds, done = [(0, "photo decoded, plan, base")], 1
    for octave, size in enumerate(octave_sizes((height, width), BASE_SIDE)):
        bounds.append((done, f"octave {octave} ({size[1]} x {size[0]})"))
        tiles = -(-size[0] // TILE_SIDE) * -(-size[1] // TILE_SIDE)
        done += 1 + tiles
    bounds.append((done, "encoded and stored"))
    return bounds


def _rollup_mb(pid: int) -> dict[str, float]:
    """The process's resident memory by kind (``smaps_rollup``, Linux >= 4.14), in MB."""
    kinds = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            name, _, value = line.partition(":")
            if name in ("Rss", "Anonymous", "Shared_Clean", "Private_Clean", "Private_Dirty"):
                kinds[name] = int(value.split()[0]) / 1024
    return kinds


async def measure(
    server: Server, photo: bytes, side: int, aspect: float, before: float, count: int
) -> None:
    """One print, its stages' peaks over ``before`` (the RSS before the first print)."""
    bounds = stage_bounds(side, aspect)
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        reset_peak_rss(server.pid)
        stage = "upload (checked, stored as uploaded)"
        peaks: dict[str, float] = {}

        def next_stage(name: str) -> None:
            nonlocal stage
            if name != stage:
                peaks[stage] = max(peaks.get(stage, 0.0), peak_rss_mb(server.pid) - before)
                reset_peak_rss(server.pid)
                stage = name

        files = [("content", ("p.jpg", photo)), ("style", ("s.png", _noise_png(64, 9)))]
        data = {"size": str(side), "seed": "0"}
        response = await client.post("/v1/stylize", files=files, data=data, headers=ASYNC)
        response.raise_for_status()
        job_id = response.json()["id"]
        started = time.monotonic()
        while True:
            body = (await client.get(f"/v1/jobs/{job_id}")).json()
            if body["state"] in ("succeeded", "failed", "cancelled"):
                break
            if body["state"] == "running":
                step = (body.get("progress") or {}).get("step") or 0
                next_stage([name for first, name in bounds if step >= first][-1])
            await asyncio.sleep(0.05)
        next_stage("done")
        if body["state"] != "succeeded":
            raise RuntimeError(f"the print {body['state']}: {body.get('error')}")
        seconds = time.monotonic() - started
        await asyncio.sleep(1.0)
        thumbnail = await client.get(f"/v1/jobs/{job_id}/thumbnail")  # what a gallery asks
        thumbnail.raise_for_status()
        peaks["its thumbnail (256 px)"] = peak_rss_mb(server.pid) - before
        print(f"print {count}: {side} px (aspect {aspect}), done in {seconds:.0f} s")
        print("stage                              | peak RSS growth (MB)")
        for name, peak in peaks.items():
            print(f"{name:<34} | {peak:8.0f}")
        print(f"{'the largest':<34} | {max(peaks.values()):8.0f}")
        print(f"{'RSS growth once stored':<34} | {rss_mb(server.pid) - before:8.0f}")
        kinds = ", ".join(f"{name} {mb:.0f}" for name, mb in _rollup_mb(server.pid).items())
        print(f"resident now (MB): {kinds}")


async def main(args: argparse.Namespace) -> None:
    photo = smooth_photo(args.side, seed=3, aspect=args.aspect)
    settings = {
        "max_side": str(args.side),
        "job_results_max_bytes": str(200 * 2**20),
        "job_timeout_s": "7200",
    }
    with Server(models="adain", weights_dir=args.weights_dir, settings=settings) as server:
        before = rss_mb(server.pid)
        kinds = ", ".join(f"{name} {mb:.0f}" for name, mb in _rollup_mb(server.pid).items())
        print(f"resident before (MB): {kinds}")
        for count in range(1, args.prints + 1):
            await measure(server, photo, args.side, args.aspect, before, count)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, default=8192, help="the print's longer side")
    parser.add_argument("--aspect", type=float, default=1.0, help="shorter side over longer")
    parser.add_argument("--prints", type=int, default=1, help="prints painted one after another")
    parser.add_argument(
        "--weights-dir", type=Path, default=os.environ.get("ATELIER_WEIGHTS_DIR") or None
    )
    asyncio.run(main(parser.parse_args()))

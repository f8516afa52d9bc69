"""Big results beside small jobs, against a real ``atelier serve`` (the real AdaIN on the
CPU): what writing and reading tens of megabytes per result costs everyone else.

Scenarios (of ``service_faults.py``):

``big-results`` (SQLite) and ``big-results-redis`` (Debian's ``redis-server`` on a free
loopback port)
    1. Idle: ``--small-jobs`` small async stylizes (96 px noise photo, 64 px style),
       ``--small-concurrency`` at a time; each job's seconds from its submit to
       ``succeeded`` as its client polls (every 0.1 s).
    2. Big: ``--big-count`` prints of a ``--big-side`` px photo, ``--big-aspect`` as high
       as it is wide (a smooth random field, so the upload is small and the painted result
       is not), submitted as jobs at once, and the same small jobs again while they are
       painted and stored; ``/readyz`` is polled every 0.2 s throughout.
    3. Reads: every print's result downloaded through its ``result_url`` by
       ``--result-readers`` clients at once, streamed to nothing, and the last MB of each
       read again with ``Range``, over and over while the small jobs run a third time.
       The readers run in a process of their own, its nice raised by ``READERS_NICE``:
       a download's bytes are parsed and hashed on the client's machine, not the
       server's, and within the benchmark's process they held up the small jobs' own
       polling loop (the figure then measured the benchmark's client). The bytes read
       and the server's CPU seconds over the phase are reported, beside its CPU seconds
       for the idle round of small jobs: the difference is what the reads cost it.
    4. Idle again: the small jobs once more, the prints done and the readers gone. The
       ratios divide by the p95 of both idle rounds' jobs together: one round's p95
       moved twofold between two runs whose idle rounds ran the same code (0.73 s and
       1.50 s), and each ratio with it. Both rounds' own p95s are reported.

    Figures: the store's breaker openings (``/readyz`` turning 503; target 0); the small
    jobs' p95 over idle while the prints are painted and stored, and while the results
    are read (target < 1.5x each; the prints' painting shares the machine's cores with
    the small jobs, so on a 2-core CPU the first figure measures the painting as much as
    the writes); the server's peak RSS growth while the prints are painted and stored,
    and while the results are read (target < 300 MB each: the issue's bound on the
    server's growth over the whole scenario; results streamed, not held); every result's
    size as its job's ``file_bytes`` says, and the ranges right.

``clip-beside`` (SQLite)
    The same small jobs idle, then while a clip is stylised: a ``--clip-seconds`` 24 fps
    H.264 MP4 made here (a textured gradient panning, ``--clip-height`` rows at 16:9),
    sent as a job; the small jobs start once its first chunk is painted. Figures: the
    small jobs' p95 over idle (target < 1.5x, as beside prints: a clip is bulk work whose
    chunks yield the device), whether the clip was still being painted when the small
    jobs were done (else the figure is partly idle), and the clip's own seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import io
import multiprocessing
import os
import statistics
import time
from typing import Any

import av
import httpx
import numpy as np
from job_faults import ASYNC, _finished, redis_running
from PIL import Image
from serve_process import Check, Footprint, Server, p95


def _noise_png(side: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (side, side, 3), np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def smooth_photo(side: int, seed: int, aspect: float = 0.75) -> bytes:
    """A ``side`` x ``aspect * side`` JPEG of a random field upsampled from 48 x 36 px: a
    photo of a few MB whatever its size, which a painting fills with texture."""
    rng = np.random.default_rng(seed)
    small = Image.fromarray(rng.integers(0, 256, (36, 48, 3), np.uint8))
    photo = small.resize((side, round(side * aspect)), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    photo.save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


class Watch:
    """Polls ``/readyz`` until stopped; counts its turns from 200 to 503."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.openings = 0
        self.stopped = False

    async def run(self) -> None:
        was_down = False
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as client:
            while not self.stopped:
                with contextlib.suppress(httpx.TransportError):
                    down = (await client.get("/readyz")).status_code == 503
                    self.openings += down and not was_down
                    was_down = down
                await asyncio.sleep(0.2)


async def _small_jobs(client: httpx.AsyncClient, args: argparse.Namespace) -> list[float]:
    """Seconds from submit to succeeded of each small job; a 503 is an opening seen."""
    content, style = _noise_png(96, 7), _noise_png(64, 8)
    slots = asyncio.Semaphore(args.small_concurrency)
    seconds: list[float] = []

    async def one(index: int) -> None:
        async with slots:
            sent = time.monotonic()
            files = [("content", ("c.png", content)), ("style", ("s.png", style))]
            response = await client.post(
                "/v1/stylize",
                files=files,
                data={"size": "96", "seed": str(index)},
                headers=ASYNC,
            )
            if response.status_code != 202:
                raise RuntimeError(f"small job refused: {response.status_code} {response.text}")
            final = await _finished(client, response.json()["id"])
            if final["state"] != "succeeded":
                raise RuntimeError(f"small job {final['id']} {final['state']}")
            seconds.append(time.monotonic() - sent)

    await asyncio.gather(*(one(index) for index in range(args.small_jobs)))
    return seconds


async def _read_result(client: httpx.AsyncClient, job_id: str) -> tuple[int, str, bool]:
    """(bytes, SHA-256, whether the last MB read with Range is the same bytes)."""
    digest, size, tail = hashlib.sha256(), 0, bytearray()
    async with client.stream("GET", f"/v1/jobs/{job_id}/result") as response:
        response.raise_for_status()
        tail_from = int(response.headers["content-length"]) - TAIL_BYTES
        async for chunk in response.aiter_bytes():
            digest.update(chunk)
            if size + len(chunk) > tail_from:
                tail += chunk[max(0, tail_from - size) :]
            size += len(chunk)
    start = size - len(tail)
    ranged = await client.get(
        f"/v1/jobs/{job_id}/result", headers={"Range": f"bytes={start}-{size - 1}"}
    )
    return (
        size,
        digest.hexdigest(),
        ranged.status_code == 206 and ranged.content == tail,
    )


#: The end of each result read again with ``Range``.
TAIL_BYTES = 1024 * 1024
#: How much lower (a ``nice`` increment) the readers' process runs than the benchmark.
READERS_NICE = 10


def _reader_process(url: str, job_ids: list[str], readers: int, stop: Any, out: Any) -> None:
    """The readers' process (see the module's text): ``out`` gets ``({job id: the first
    read of it}, the bytes read in all, None)`` once ``stop`` is set and each was read,
    or ``({}, 0, the error that stopped them)``."""
    os.nice(READERS_NICE)
    try:
        out.put((*asyncio.run(_read_until(url, job_ids, readers, stop)), None))
    except Exception as exc:  # noqa: BLE001 (handed to the parent, which raises it)
        out.put(({}, 0, f"the readers failed: {exc!r}"))


async def _read_until(
    url: str, job_ids: list[str], readers: int, stop: Any
) -> tuple[dict[str, tuple[int, str, bool]], int]:
    first: dict[str, tuple[int, str, bool]] = {}
    read = 0

    async def reader(index: int) -> None:
        nonlocal read
        while not stop.is_set() or len(first) < len(job_ids):
            for job_id in job_ids[index::readers]:
                outcome = await _read_result(client, job_id)
                first.setdefault(job_id, outcome)
                read += outcome[0]

    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await asyncio.gather(*(reader(index) for index in range(readers)))
    return first, read


async def _reads_beside_small_jobs(
    client: httpx.AsyncClient, finals: list[dict], args: argparse.Namespace
) -> tuple[list[tuple[int, str, bool]], list[float], int]:
    """Every result read by ``--result-readers`` clients of a process of their own, over
    and over until a round of small jobs run meanwhile is done: (the first read of each,
    the small jobs' seconds, the bytes read in all)."""
    ids = [final["id"] for final in finals]
    spawn = multiprocessing.get_context("spawn")
    stop, out = spawn.Event(), spawn.Queue()
    readers = min(args.result_readers, len(ids))
    process = spawn.Process(
        target=_reader_process, args=(str(client.base_url), ids, readers, stop, out)
    )
    process.start()
    try:
        beside = await _small_jobs(client, args)
    finally:
        stop.set()
    first, read, error = await asyncio.to_thread(out.get)
    process.join()
    if error is not None:
        raise RuntimeError(error)
    return [first[job_id] for job_id in ids], beside, read


def _result_bytes(final: dict) -> int:
    """A succeeded job's result bytes, from its JSON: the linked file's size, or the
    inline image's."""
    result = final.get("result") or {}
    if "file_bytes" in result:
        return sum(result["file_bytes"])
    return sum(len(base64.b64decode(image)) for image in result.get("images", []))


@contextlib.contextmanager
def _store(store: str):
    """The server's settings for a store of its own: SQLite (its default), or Redis."""
    if store == "sqlite":
        yield {}
        return
    with redis_running() as server:
        yield {"redis_url": server.url}


async def big_results(args: argparse.Namespace):
    return await _big_results(args, "sqlite")


async def big_results_redis(args: argparse.Namespace):
    return await _big_results(args, "redis")


async def _big_results(args: argparse.Namespace, store: str):
    """See the module's text."""
    name = f"big-results ({store})"
    settings = {
        "max_side": str(args.big_side),
        "job_results_max_bytes": str(args.big_count * 200 * 1024 * 1024),
        # a queued print's input is its decoded photo (a PNG of tens of MB at 8192 px)
        "job_inputs_max_bytes": str(args.big_count * 200 * 1024 * 1024),
        "job_timeout_s": "7200",
    }
    photo = smooth_photo(args.big_side, seed=3, aspect=args.big_aspect)
    with _store(store) as store_settings:
        settings |= store_settings
        with Server(models="adain", weights_dir=args.weights_dir, settings=settings) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
                await _small_jobs(client, args)  # warm-up
                idling = Footprint(server.pid)
                idle = await _small_jobs(client, args)
                idle_cpu_s = idling.cpu_s()
                watch = Watch(server.url)
                watching = asyncio.create_task(watch.run())
                painting = Footprint(server.pid)
                big_ids = []
                for index in range(args.big_count):
                    files = [
                        ("content", ("p.jpg", photo)),
                        ("style", ("s.png", _noise_png(64, 9))),
                    ]
                    data = {"size": str(args.big_side), "seed": str(index)}
                    response = await client.post(
                        "/v1/stylize", files=files, data=data, headers=ASYNC
                    )
                    if response.status_code != 202:
                        raise RuntimeError(f"print refused: {response.status_code} {response.text}")
                    big_ids.append(response.json()["id"])
                loaded = await _small_jobs(client, args)
                finals = [await _finished(client, job_id, limit_s=7200) for job_id in big_ids]
                painting_growth = painting.growth_mb()
                reading = Footprint(server.pid)
                reads, beside_reads, read = await _reads_beside_small_jobs(client, finals, args)
                reading_growth, reading_cpu_s = reading.growth_mb(), reading.cpu_s()
                idle_after = await _small_jobs(client, args)
                watch.stopped = True
                await watching
    idle_before, idle = idle, idle + idle_after
    states = [final["state"] for final in finals]
    expected = [_result_bytes(final) for final in finals]
    sizes_right = all(size == want for (size, _, _), want in zip(reads, expected, strict=True))
    ranges_right = all(ranged for _, _, ranged in reads)
    ratio = p95(loaded) / p95(idle)
    reading_ratio = p95(beside_reads) / p95(idle)
    result = {
        "scenario": name,
        "store": store,
        "big_count": args.big_count,
        "big_side": args.big_side,
        "photo_bytes": len(photo),
        "states": states,
        "result_mb": [round(size / 2**20, 1) for size, _, _ in reads],
        "breaker_openings": watch.openings,
        "small_idle_p95_s": round(p95(idle), 3),
        "small_idle_before_p95_s": round(p95(idle_before), 3),
        "small_idle_after_p95_s": round(p95(idle_after), 3),
        "small_loaded_p95_s": round(p95(loaded), 3),
        "small_loaded_median_s": round(statistics.median(loaded), 3),
        "small_beside_reads_p95_s": round(p95(beside_reads), 3),
        "rss_growth_painting_mb": round(painting_growth),
        "rss_growth_reading_mb": round(reading_growth),
        "read_mb": round(read / 2**20),
        "server_cpu_s_small_jobs_idle": round(idle_cpu_s, 1),
        "server_cpu_s_small_jobs_and_reads": round(reading_cpu_s, 1),
    }
    checks = [
        Check(name, "prints succeeded", f"{states.count('succeeded')}/{len(states)}", "all",
              states.count("succeeded") == len(states)),
        Check(name, "breaker openings", str(watch.openings), "0", watch.openings == 0),
        Check(name, "small jobs' p95, prints painted and stored, over idle", f"{ratio:.2f}x",
              "< 1.5x", ratio < 1.5),
        Check(name, "small jobs' p95, results read, over idle", f"{reading_ratio:.2f}x",
              "< 1.5x", reading_ratio < 1.5),
        Check(name, "RSS growth while the prints are painted and stored",
              f"{painting_growth:.0f} MB", "< 300 MB", painting_growth < 300),
        Check(name, "RSS growth while the results are read", f"{reading_growth:.0f} MB",
              "< 300 MB", reading_growth < 300),
        Check(name, "results whole and ranges right", f"{sizes_right and ranges_right}",
              "True", sizes_right and ranges_right),
    ]  # fmt: skip
    return result, checks


def panning_clip(seconds: float, height: int, fps: int = 24) -> bytes:
    """An H.264 MP4 of ``seconds`` at ``fps``: a smooth random field panning across a
    ``16/9 * height`` x ``height`` frame (the motion a clip's blend follows)."""
    width = round(height * 16 / 9 / 2) * 2
    frames = round(seconds * fps)
    rng = np.random.default_rng(5)
    small = Image.fromarray(rng.integers(0, 256, (9, 32, 3), np.uint8))
    field = np.asarray(small.resize((width + 4 * frames, height), Image.Resampling.BICUBIC))
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(
                np.ascontiguousarray(field[:, 4 * index : 4 * index + width]),
                format="rgb24",
            )
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return buffer.getvalue()


async def clip_beside(args: argparse.Namespace):
    """See the module's text."""
    name = "clip-beside (sqlite)"
    clip = panning_clip(args.clip_seconds, args.clip_height)
    settings = {"video_job_timeout_s": "7200"}
    with Server(models="adain", weights_dir=args.weights_dir, settings=settings) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
            await _small_jobs(client, args)  # warm-up
            idle = await _small_jobs(client, args)
            files = [
                ("content", ("clip.mp4", clip)),
                ("style", ("s.png", _noise_png(64, 9))),
            ]
            sent = time.monotonic()
            response = await client.post("/v1/stylize", files=files, headers=ASYNC)
            if response.status_code != 202:
                raise RuntimeError(f"clip refused: {response.status_code} {response.text}")
            clip_id = response.json()["id"]
            while (job := (await client.get(f"/v1/jobs/{clip_id}")).json())["state"] in (
                "queued",
                "running",
            ) and job["progress"]["step"] == 0:
                await asyncio.sleep(0.1)
            beside = await _small_jobs(client, args)
            still_painted = (await client.get(f"/v1/jobs/{clip_id}")).json()["state"] == "running"
            final = await _finished(client, clip_id, limit_s=7200)
            clip_s = time.monotonic() - sent
    ratio = p95(beside) / p95(idle)
    result = {
        "scenario": name,
        "clip_seconds": args.clip_seconds,
        "clip_height": args.clip_height,
        "clip_bytes": len(clip),
        "clip_state": final["state"],
        "clip_painted_s": round(clip_s, 1),
        "clip_still_painted_after_small_jobs": still_painted,
        "small_idle_p95_s": round(p95(idle), 3),
        "small_beside_clip_p95_s": round(p95(beside), 3),
        "small_beside_clip_median_s": round(statistics.median(beside), 3),
    }
    checks = [
        Check(name, "clip succeeded", final["state"], "succeeded", final["state"] == "succeeded"),
        Check(name, "clip painted through the small jobs", str(still_painted), "True",
              still_painted),
        Check(name, "small jobs' p95 beside the clip, over idle", f"{ratio:.2f}x", "< 1.5x",
              ratio < 1.5),
    ]  # fmt: skip
    return result, checks


SCENARIOS = {
    "big-results": big_results,
    "big-results-redis": big_results_redis,
    "clip-beside": clip_beside,
}

__all__ = ["SCENARIOS"]

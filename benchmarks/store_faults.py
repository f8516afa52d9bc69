"""Job-store outages against a real ``atelier serve`` (the real DiT on the CPU): what
clients get while the store stalls or its disk is full, and that nothing is lost.

Scenarios (of ``service_faults.py``):

``store-stall``
    A steady mix, every ``--mix-interval-s``: a read of a finished job, an async submit
    (``steps=2``, its own seed) and a synchronous generate (``steps=2``), each timed.
    Redis (Debian's ``redis-server`` on a free loopback port) is stopped with SIGSTOP
    for ``--stall-s`` seconds, then SIGCONT, and the mix goes on a while. Figures: the
    time from SIGSTOP to the first 503; the p95 of every answer while the store is away
    (target < 1 s); the time from SIGCONT to the first read answered 200 again (target
    < 5 s); the share of synchronous requests served during the outage (target 100 %);
    accepted jobs lost (every 202 must end ``succeeded``; target 0); jobs whose images
    differ from a synchronous run of the same seed (target 0).

``store-full``
    The SQLite store on a tmpfs of ``--tmpfs-mb`` MB (mounted here; needs root), filled
    by a file to the last byte once the server is up; the same mix for ``--full-s``
    seconds, then the file is removed. Figures: the answers' statuses (target: 507 or
    503, never 500 or a hang), their p95 (target < 1 s), synchronous requests served
    (100 %), the time from freeing the disk to the first accepted submit (target < 5 s),
    accepted jobs lost (0).

``disk-full``
    The SQLite store (the real AdaIN) on a tmpfs of ``--disk-mb`` MB (needs root): a
    print of a ``--photo-side`` px noise photo is accepted, then the disk is filled to
    ``--spare-mb`` MB free, so its result cannot be stored. Figures: the job's end
    (target: ``failed`` with ``storage_full``, 0 recomputes), reads and synchronous
    stylizes answered while full (100 %, p95 < 2x the same rounds beside the same print
    on a free disk, so that the print's own CPU is in both; "idle", the same rounds before
    any print, is printed too), a submit that does not fit (507 ``store_full``), and, once
    the filler is removed and the jobs expire (``--ttl-s``), the share of the volume used
    (target < 10 %) without a restart, and how long that took (SQLite deletes at expiry;
    Redis at the reaper's next sweep of the blobs nothing refers to).

``disk-full-redis``
    The same on Redis (Debian's ``redis-server`` on a free loopback port), whose big
    inputs and results live on the ``--disk-mb`` tmpfs (``blob_dir``); Redis full itself
    (its ``maxmemory``) answers 507 as the tests show.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from job_faults import ASYNC, _finished, _redis_server_class, redis_running
from PIL import Image
from scenario_flags import FlagGroup
from serve_process import Check, Server, p95

SMALL = {"prompt": "a red circle left of a blue square", "steps": 2}


class Mix:
    """The steady mix of reads, async submits and synchronous requests, each answer
    recorded as ``(sent, kind, status, seconds)``; accepted jobs with their seeds."""

    def __init__(self, url: str, read_id: str, interval_s: float) -> None:
        self.url = url
        self.read_id = read_id
        self.interval_s = interval_s
        self.answers: list[tuple[float, str, int, float]] = []
        self.accepted: dict[str, int] = {}
        self.stopped = False

    async def _one(self, client: httpx.AsyncClient, kind: str, seed: int) -> None:
        sent = time.monotonic()
        try:
            if kind == "read":
                response = await client.get(f"/v1/jobs/{self.read_id}")
            elif kind == "submit":
                body = SMALL | {"seed": seed}
                response = await client.post("/v1/generate", json=body, headers=ASYNC)
                if response.status_code == 202:
                    self.accepted[response.json()["id"]] = seed
            else:
                response = await client.post("/v1/generate", json=SMALL | {"seed": seed})
            status = response.status_code
        except httpx.TimeoutException:
            status = 0  # no answer within the client's 30 s: a hang
        self.answers.append((sent, kind, status, time.monotonic() - sent))

    async def run(self) -> None:
        seed = 1000
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as client:
            pending: set[asyncio.Task[None]] = set()
            while not self.stopped:
                for kind in ("read", "submit", "sync"):
                    seed += 1
                    task = asyncio.ensure_future(self._one(client, kind, seed))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                await asyncio.sleep(self.interval_s)
            await asyncio.gather(*pending)

    def during(self, start: float, stop: float) -> list[tuple[float, str, int, float]]:
        return [answer for answer in self.answers if start <= answer[0] < stop]


async def _reference_images(url: str, seeds: list[int]) -> dict[int, str]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        found = {}
        for seed in seeds:
            response = await client.post("/v1/generate", json=SMALL | {"seed": seed})
            response.raise_for_status()
            found[seed] = response.json()["images"][0]
        return found


async def _outcomes(url: str, accepted: dict[str, int]) -> tuple[int, int]:
    """(jobs lost, jobs whose image differs from a synchronous run of their seed)."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        finals = [await _finished(client, job_id, limit_s=300) for job_id in accepted]
    lost = sum(final["state"] != "succeeded" for final in finals)
    done = {final["id"]: final for final in finals if final["state"] == "succeeded"}
    references = await _reference_images(url, [accepted[job_id] for job_id in done])
    differ = sum(
        base64.b64decode(final["result"]["images"][0])
        != base64.b64decode(references[accepted[job_id]])
        for job_id, final in done.items()
    )
    return lost, differ


async def _first_job(url: str) -> str:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        response = await client.post("/v1/generate", json=SMALL | {"seed": 1}, headers=ASYNC)
        response.raise_for_status()
        job_id = response.json()["id"]
        await _finished(client, job_id)
        return job_id


async def store_stall(args: argparse.Namespace):
    with tempfile.TemporaryDirectory() as folder:
        redis = _redis_server_class()(Path(folder) / "redis").start()
        try:
            with Server(models="dit", settings={"redis_url": redis.url}) as server:
                mix = Mix(server.url, await _first_job(server.url), args.mix_interval_s)
                running = asyncio.ensure_future(mix.run())
                await asyncio.sleep(args.settle_s)
                stopped = time.monotonic()
                os.kill(redis.process.pid, signal.SIGSTOP)
                try:
                    await asyncio.sleep(args.stall_s)
                finally:
                    os.kill(redis.process.pid, signal.SIGCONT)
                resumed = time.monotonic()
                await asyncio.sleep(args.settle_s)
                mix.stopped = True
                await running
                lost, differ = await _outcomes(server.url, mix.accepted)
        finally:
            redis.stop()
    away = mix.during(stopped, resumed)
    first_503 = min(
        (sent + seconds for sent, _, status, seconds in away if status == 503), default=None
    )
    back = [
        sent + seconds
        for sent, kind, status, seconds in mix.answers
        if kind == "read" and status == 200 and sent >= resumed
    ]
    sync_away = [status for _, kind, status, _ in away if kind == "sync"]
    result = {
        "scenario": "store-stall",
        "stall_s": args.stall_s,
        "answers_during_outage": len(away),
        "first_503_after_s": None if first_503 is None else round(first_503 - stopped, 3),
        "p95_during_outage_s": round(p95([seconds for *_, seconds in away]), 3),
        "statuses_during_outage": _counts(away),
        "recovered_after_s": round(min(back) - resumed, 3) if back else None,
        "sync_served_during_outage": f"{sync_away.count(200)}/{len(sync_away)}",
        "accepted": len(mix.accepted),
        "lost": lost,
        "differ": differ,
    }
    checks = [
        Check(
            "store-stall",
            "answer p95 while the store is away",
            f"{result['p95_during_outage_s']} s",
            "< 1 s",
            result["p95_during_outage_s"] < 1.0,
        ),
        Check(
            "store-stall",
            "SIGCONT to reads answered again",
            f"{result['recovered_after_s']} s",
            "< 5 s",
            result["recovered_after_s"] is not None and result["recovered_after_s"] < 5.0,
        ),
        Check(
            "store-stall",
            "sync requests served during the outage",
            result["sync_served_during_outage"],
            "100 %",
            bool(sync_away) and sync_away.count(200) == len(sync_away),
        ),
        Check("store-stall", "accepted jobs lost", str(lost), "0", lost == 0),
        Check("store-stall", "jobs with another result", str(differ), "0", differ == 0),
    ]
    return result, checks


@contextlib.contextmanager
def small_tmpfs(megabytes: int):
    folder = Path(tempfile.mkdtemp(prefix="atelier-full-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(folder)], check=True
    )
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


def _fill(path: Path) -> None:
    """Write ``path`` (unbuffered) until the file system has no byte left."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for chunk in (bytes(64 * 1024), bytes(1)):
            with contextlib.suppress(OSError):
                while os.write(descriptor, chunk):
                    pass
    finally:
        os.close(descriptor)


async def store_full(args: argparse.Namespace):
    with (
        small_tmpfs(args.tmpfs_mb) as folder,
        Server(models="dit", settings={"state_dir": str(folder / "state")}) as server,
    ):
        mix = Mix(server.url, await _first_job(server.url), args.mix_interval_s)
        filler = folder / "filler"
        _fill(filler)
        full = time.monotonic()
        running = asyncio.ensure_future(mix.run())
        await asyncio.sleep(args.full_s)
        filler.unlink()
        freed = time.monotonic()
        await asyncio.sleep(args.settle_s)
        mix.stopped = True
        await running
        lost, differ = await _outcomes(server.url, mix.accepted)
    while_full = mix.during(full, freed)
    accepted_again = [
        sent + seconds
        for sent, kind, status, seconds in mix.answers
        if kind == "submit" and status == 202 and sent >= freed
    ]
    sync_full = [status for _, kind, status, _ in while_full if kind == "sync"]
    statuses = _counts(while_full)
    result = {
        "scenario": "store-full",
        "statuses_while_full": statuses,
        "p95_while_full_s": round(p95([seconds for *_, seconds in while_full]), 3),
        "recovered_after_s": round(min(accepted_again) - freed, 3) if accepted_again else None,
        "sync_served_while_full": f"{sync_full.count(200)}/{len(sync_full)}",
        "accepted": len(mix.accepted),
        "lost": lost,
        "differ": differ,
    }
    bad = {status for status in statuses if status in (0, 500)}
    checks = [
        Check(
            "store-full",
            "answers while full (no 500, no hang)",
            str(statuses),
            "507/503, never 500",
            not bad,
        ),
        Check(
            "store-full",
            "answer p95 while full",
            f"{result['p95_while_full_s']} s",
            "< 1 s",
            result["p95_while_full_s"] < 1.0,
        ),
        Check(
            "store-full",
            "sync requests served while full",
            result["sync_served_while_full"],
            "100 %",
            bool(sync_full) and sync_full.count(200) == len(sync_full),
        ),
        Check(
            "store-full",
            "disk freed to a submit accepted",
            f"{result['recovered_after_s']} s",
            "< 5 s",
            result["recovered_after_s"] is not None and result["recovered_after_s"] < 5.0,
        ),
        Check("store-full", "accepted jobs lost", str(lost), "0", lost == 0),
    ]
    return result, checks


def _noise_png(width: int, height: int, seed: int) -> bytes:
    """A photo PNG cannot compress (about ``3 * width * height`` bytes)."""
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def _fill_leaving(path: Path, folder: Path, spare_bytes: int) -> None:
    """Write ``path`` until ``folder``'s file system has about ``spare_bytes`` free."""
    free = shutil.disk_usage(folder).free
    with open(path, "wb") as file:
        file.write(bytes(max(0, free - spare_bytes)))


class TmpfsVolume:
    """The SQLite store's volume: a tmpfs of ``megabytes``, filled by a file."""

    name = "sqlite"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.filler = folder / "filler"

    def settings(self) -> dict[str, str]:
        return {"state_dir": str(self.folder / "state")}

    def fill(self, spare_bytes: int) -> None:
        _fill_leaving(self.filler, self.folder, spare_bytes)

    def free(self) -> None:
        self.filler.unlink()

    def used_share(self) -> float:
        usage = shutil.disk_usage(self.folder)
        return usage.used / usage.total


class RedisVolume(TmpfsVolume):
    """The Redis store's volume: Redis (Debian's ``redis-server`` on a free loopback port)
    keeps the records, and the big inputs and results live as files on the tmpfs (the
    blob store's ``blob_dir``), as a Redis deployment with a volume keeps them."""

    name = "redis"

    def __init__(self, folder: Path, server) -> None:
        super().__init__(folder)
        self.server = server

    def settings(self) -> dict[str, str]:
        return {"redis_url": self.server.url, "blob_dir": str(self.folder / "blobs")}


@contextlib.contextmanager
def _volume(store: str, megabytes: int):
    with small_tmpfs(megabytes) as folder:
        if store == "sqlite":
            yield TmpfsVolume(folder)
            return
        with redis_running() as server:
            yield RedisVolume(folder, server)


async def disk_full(args: argparse.Namespace):
    return await _disk_full(args, "sqlite")


async def disk_full_redis(args: argparse.Namespace):
    return await _disk_full(args, "redis")


async def _disk_full(args: argparse.Namespace, store: str):
    """See the module's text."""
    photo = _noise_png(args.photo_side, args.photo_side * 3 // 4, seed=5)
    style = _noise_png(64, 64, seed=6)
    small = _noise_png(96, 72, seed=7)

    def files(content: bytes, size: int) -> tuple[list, dict]:
        parts = [
            ("content", ("c.png", content, "image/png")),
            ("style", ("s.png", style, "image/png")),
        ]
        return parts, {"size": str(size)}

    settings = {
        "job_ttl_s": str(args.ttl_s),
        "job_lease_s": "3",
        "max_upload_bytes": str(64 * 1024 * 1024),
        "max_stylize_upload_bytes": str(64 * 1024 * 1024),
        "max_side": "8192",
    }
    with _volume(store, args.disk_mb) as volume:
        settings |= volume.settings()
        with Server(models="adain", weights_dir=args.weights_dir, settings=settings) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:

                async def sync_round() -> tuple[float, int]:
                    sent = time.monotonic()
                    parts, data = files(small, 96)
                    response = await client.post("/v1/stylize", files=parts, data=data)
                    return time.monotonic() - sent, response.status_code

                async def read_round(job_id: str) -> tuple[float, int]:
                    sent = time.monotonic()
                    response = await client.get(f"/v1/jobs/{job_id}")
                    return time.monotonic() - sent, response.status_code

                parts, data = files(small, 96)
                first = await client.post("/v1/stylize", files=parts, data=data, headers=ASYNC)
                first_id = first.json()["id"]
                await _finished(client, first_id)
                idle = [await sync_round() for _ in range(args.full_rounds)]
                idle += [await read_round(first_id) for _ in range(args.full_rounds)]
                # the same rounds beside the same print on a free disk: the print's CPU
                # without the fault
                parts, data = files(photo, args.photo_side)
                beside = await client.post("/v1/stylize", files=parts, data=data, headers=ASYNC)
                beside.raise_for_status()
                busy = [await sync_round() for _ in range(args.full_rounds)]
                busy += [await read_round(beside.json()["id"]) for _ in range(args.full_rounds)]
                await _finished(client, beside.json()["id"], limit_s=600)
                accepted = await client.post("/v1/stylize", files=parts, data=data, headers=ASYNC)
                accepted.raise_for_status()
                big_id = accepted.json()["id"]
                volume.fill(args.spare_mb * 1024 * 1024)
                full = [await sync_round() for _ in range(args.full_rounds)]
                full += [await read_round(big_id) for _ in range(args.full_rounds)]
                final = await _finished(client, big_id, limit_s=600)
                # bigger than what the failed job's input left free
                bigger = _noise_png(args.photo_side * 3 // 2, args.photo_side * 9 // 8, seed=8)
                parts, data = files(bigger, args.photo_side * 3 // 2)
                refused = await client.post("/v1/stylize", files=parts, data=data, headers=ASYNC)
                volume.free()
                freed_at = time.monotonic()
                # an expired job's files go at once (SQLite) or at the reaper's next sweep
                # of blobs nothing refers to (Redis: every 60 s, once a minute old)
                expired_by = freed_at + args.ttl_s + 150
                while time.monotonic() < expired_by and volume.used_share() >= 0.10:
                    await asyncio.sleep(0.5)
                used_after = volume.used_share()
                emptied_after_s = time.monotonic() - freed_at
    idle_p95 = p95([seconds for seconds, _ in idle])
    busy_p95 = p95([seconds for seconds, _ in busy])
    full_p95 = p95([seconds for seconds, _ in full])
    answered = sum(status == 200 for _, status in full)
    error = final.get("error") or {}
    result = {
        "scenario": f"disk-full ({store})",
        "store": store,
        "disk_mb": args.disk_mb,
        "photo_bytes": len(photo),
        "job_state": final["state"],
        "job_error_code": error.get("code"),
        "result_file_bytes": (final.get("result") or {}).get("file_bytes"),
        "attempts": final["attempts"],
        "recomputed": max(0, final["attempts"] - 1),
        "idle_p95_s": round(idle_p95, 3),
        "beside_a_print_p95_s": round(busy_p95, 3),
        "full_p95_s": round(full_p95, 3),
        "read_idle_p95_s": round(p95([t for t, _ in idle[args.full_rounds :]]), 3),
        "read_full_p95_s": round(p95([t for t, _ in full[args.full_rounds :]]), 3),
        "answered_while_full": f"{answered}/{len(full)}",
        "sync_statuses_while_full": [status for _, status in full[: args.full_rounds]],
        "read_statuses_while_full": [status for _, status in full[args.full_rounds :]],
        "submit_while_full": refused.status_code,
        "submit_code": (refused.json().get("error") or {}).get("code"),
        "used_after_expiry": round(used_after, 3),
        "emptied_after_s": round(emptied_after_s, 1),
    }
    checks = [
        Check(
            f"disk-full ({store})",
            "recomputes",
            str(result["recomputed"]),
            "0",
            result["recomputed"] == 0,
        ),
        Check(
            f"disk-full ({store})",
            "the job's end",
            f"{final['state']} {error.get('code')}",
            "failed storage_full",
            final["state"] == "failed" and error.get("code") == "storage_full",
        ),
        Check(
            f"disk-full ({store})",
            "reads and syncs answered while full",
            result["answered_while_full"],
            "100 %",
            answered == len(full),
        ),
        Check(
            f"disk-full ({store})",
            "p95 while full over the same beside a print on a free disk",
            f"{full_p95 / busy_p95:.2f}x",
            "< 2x",
            full_p95 < 2 * busy_p95,
        ),
        Check(
            f"disk-full ({store})",
            "a submit that does not fit",
            f"{refused.status_code} {result['submit_code']}",
            "507 store_full",
            refused.status_code == 507,
        ),
        Check(
            f"disk-full ({store})",
            "volume used after expiry",
            f"{100 * used_after:.1f} % after {emptied_after_s:.0f} s",
            "< 10 %",
            used_after < 0.10,
        ),
    ]
    return result, checks


def _counts(answers) -> dict[int, int]:
    counts: dict[int, int] = {}
    for _, _, status, _ in answers:
        counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))


SCENARIOS = {
    "store-stall": store_stall,
    "store-full": store_full,
    "disk-full": disk_full,
    "disk-full-redis": disk_full_redis,
}


FLAGS = FlagGroup(
    "store scenarios",
    {
        "--stall-s": (20.0, "SIGSTOP of Redis this long"),
        "--full-s": (10.0, "the disk full this long"),
        "--tmpfs-mb": (16, "store-full's file system"),
        "--mix-interval-s": (0.2, "between mix rounds"),
        "--settle-s": (5.0, "mix before and after"),
        "--disk-mb": (64, "disk-full's file system"),
        "--spare-mb": (1, "disk-full: left free once the print is accepted"),
        "--photo-side": (2400, "disk-full: the print's longer side (a noise photo)"),
        "--ttl-s": (20.0, "disk-full: job_ttl_s"),
        "--full-rounds": (10, "disk-full: reads and syncs timed, idle and full"),
        "--big-count": (20, "big-results: prints painted and stored"),
        "--big-side": (8192, "big-results: the prints' longer side"),
        "--big-aspect": (0.75, "big-results: the prints' shorter side over the longer"),
        "--small-jobs": (50, "big-results: small jobs, idle and beside the prints"),
        "--small-concurrency": (4, "big-results: small jobs in flight at once"),
        "--result-readers": (4, "big-results: results downloaded at once"),
        "--clip-seconds": (6.0, "clip-beside: the clip's length (24 fps)"),
        "--clip-height": (360, "clip-beside: the clip's rows (16:9)"),
    },
)


__all__ = ["FLAGS", "SCENARIOS"]

"""The job scenarios of ``service_faults.py``: what happens to accepted work and to other
clients when replicas die, async backlogs pile up, or one client hogs a resource.

Every server is a real ``atelier serve`` (``serve_process.Server``, CPU, real models);
Redis is Debian's ``redis-server`` on a free loopback port. Scenarios:

``job-loss``
    Jobs in flight while replicas die. On Redis: two replicas share the store; jobs go
    in through both; one replica is SIGKILLed and restarted, then the other SIGTERMed
    (drained) and restarted, while a reader reads every job from every replica that is
    up. On SQLite: one server, SIGKILLed and restarted, then SIGTERMed and restarted.
    Targets: jobs lost 0 (every accepted job succeeds), reads answered 404: 0.
``async-flood``
    Key ``flood`` fills its quota (``--flood-jobs``) with long async jobs; key ``other``
    sends small synchronous requests, then small async jobs. Targets: the other key's
    synchronous p95 < 2x idle (and its async p95 is reported against < 2x idle: the
    two-tenant figure).
``queued-inputs``
    ``--queued`` async stylize jobs with 1024 px photos queued at once on an API replica
    whose jobs stay queued. Target: its peak RSS growth < 1 GB. The same on one process
    with its worker (which also runs batches of 1024 px forwards): reported.
``event-streams``
    One key opens ``--streams`` event streams on one long job; fresh clients read the
    probes and the job meanwhile. Targets: fresh-client success 100 %; the long job's
    time with the streams open (the key's stream limit raised to let them all in) over
    its time without, reported.
``result-reads``
    ``--readers`` concurrent GETs of a finished 1024 px stylize job; ``/healthz`` p95
    meanwhile over idle. Target < 2x.
``queue-overhead``
    The same small synchronous generate request on the local pool and through the job
    store (an ``Idempotency-Key`` sends it through the queue), interleaved, on Redis
    and on SQLite. Target: the queue's median cost per job < 5 ms.
``previews``
    The same async job with live previews on and off, side by side (``--preview-rounds``
    rounds, the order alternating), each followed on its event stream as the page
    follows it: a ``--preview-size`` px quality stylisation and a ``--preview-steps``
    step generation. Figures: each pair's time from the submit to the ``done`` event and
    the job's ``running_s``, on/off; the previews each job sent; whether on and off made
    the same result file; and, in this process, what one preview costs the model's
    thread (shrink and JPEG, of a full-size stage and of a 32 px estimate), which at two
    a second bounds the slowdown whatever the noise. Targets: the median on/off ratio
    <= 1.10 (both kinds); no preview without asking; the same result.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx
import numpy as np
import torch
from scenario_flags import FlagGroup
from serve_process import (
    ROOT,
    Check,
    Footprint,
    Server,
    cpu_seconds,
    latency_check,
    p95,
    rss_mb,
)

from models.images import encode_image

ASYNC = {"Prefer": "respond-async"}
LONG_JOB = {"prompt": "two red circles", "steps": 200, "num_images": 4}
SMALL = {"prompt": "a red circle", "steps": 10}


def _redis_server_class():
    """``tests/service/redis_server.py``'s launcher, loaded by its path."""
    spec = importlib.util.spec_from_file_location(
        "redis_server", ROOT / "tests" / "service" / "redis_server.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RedisServer


@contextmanager
def redis_running() -> Iterator:
    """A Redis of its own (Debian's ``redis-server`` on a free loopback port, in a
    temporary folder), stopped as the block ends."""
    with tempfile.TemporaryDirectory() as folder:
        server = _redis_server_class()(Path(folder) / "redis").start()
        try:
            yield server
        finally:
            server.stop()


def _keys_file(folder: Path, **keys: int) -> tuple[Path, dict[str, str]]:
    """A keys file with ``name=max_jobs`` keys; the keys by name."""
    from service.keys import KeyFile

    file = KeyFile(folder / "keys.json")
    return file.path, {name: file.add(name, max_jobs=limit) for name, limit in keys.items()}


async def _finished(client: httpx.AsyncClient, job_id: str, headers=None, limit_s=600.0) -> dict:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        response = await client.get(f"/v1/jobs/{job_id}", headers=headers)
        if response.status_code != 200:
            raise RuntimeError(f"GET job {job_id}: {response.status_code} {response.text!r}")
        body = response.json()
        if body["state"] in ("succeeded", "failed", "cancelled"):
            return body
        await asyncio.sleep(0.1)
    raise RuntimeError(f"job {job_id} did not finish in {limit_s} s")


async def _running(url: str, job_id: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while (await client.get(f"/v1/jobs/{job_id}")).json()["state"] != "running":
            await asyncio.sleep(0.05)


# --------------------------------------------------------------------- job loss
class Reader:
    """Reads every job from every replica that is up, until stopped; counts answers."""

    def __init__(self) -> None:
        self.statuses: dict[int, int] = {}
        self.unreachable = 0
        self.stopped = False

    async def run(self, urls: list[str], jobs: list[str]) -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            while not self.stopped:
                for url in list(urls):
                    for job in jobs:
                        try:
                            response = await client.get(f"{url}/v1/jobs/{job}")
                        except httpx.TransportError:
                            self.unreachable += 1
                            continue
                        self.statuses[response.status_code] = (
                            self.statuses.get(response.status_code, 0) + 1
                        )
                await asyncio.sleep(0.1)

    @asynccontextmanager
    async def reading(self, urls: list[str], jobs: list[str]) -> AsyncIterator[Reader]:
        """:meth:`run` in the background while the block runs; stopped (and awaited) as
        it ends, however it ends."""
        running = asyncio.create_task(self.run(urls, jobs))
        try:
            yield self
        finally:
            self.stopped = True
            await running


async def _submit(url: str, count: int, seed: int) -> list[str]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        ids = []
        for i in range(count):
            response = await client.post(
                "/v1/generate", json=LONG_JOB | {"seed": seed + i}, headers=ASYNC
            )
            response.raise_for_status()
            ids.append(response.json()["id"])
        return ids


def _dit_server(args: argparse.Namespace, settings: dict[str, str]) -> Server:
    """A DiT server on the job store ``settings`` name, once ready."""
    server = Server(models="dit", weights_dir=args.weights_dir, settings=settings)
    server.wait_ready()
    return server


async def _loss_on_redis(args: argparse.Namespace, folder: Path) -> dict:
    redis = _redis_server_class()(folder / "redis").start()
    settings = {"redis_url": redis.url, "job_lease_s": "5", "shutdown_timeout_s": "10"}
    a, b = _dit_server(args, settings), _dit_server(args, settings)
    urls = [a.url, b.url]
    jobs = await _submit(a.url, args.loss_jobs // 2, 0) + await _submit(
        b.url, args.loss_jobs // 2, 100
    )
    reader = Reader()
    try:
        async with reader.reading(urls, jobs):
            await _running(a.url, jobs[0])
            urls.remove(a.url)
            a.kill()
            a = _dit_server(args, settings)
            urls.append(a.url)
            await asyncio.sleep(2)
            urls.remove(b.url)
            b.stop()  # SIGTERM: drain, hand back
            b = _dit_server(args, settings)
            urls.append(b.url)
            async with httpx.AsyncClient(base_url=a.url, timeout=30) as client:
                finals = [await _finished(client, job) for job in jobs]
    finally:
        a.stop()
        b.stop()
        redis.stop()
    return {"finals": finals, "reader": reader}


async def _loss_on_sqlite(args: argparse.Namespace, folder: Path) -> dict:
    settings = {"state_dir": str(folder / "state"), "job_lease_s": "5", "shutdown_timeout_s": "10"}
    current = _dit_server(args, settings)
    urls = [current.url]
    jobs = await _submit(current.url, args.loss_jobs, 200)
    reader = Reader()
    try:
        async with reader.reading(urls, jobs):
            await _running(current.url, jobs[0])
            for stop in ("kill", "stop"):
                urls.clear()
                getattr(current, stop)()
                current = _dit_server(args, settings)
                urls.append(current.url)
                await asyncio.sleep(2)
            async with httpx.AsyncClient(base_url=current.url, timeout=30) as client:
                finals = [await _finished(client, job) for job in jobs]
    finally:
        current.stop()
    return {"finals": finals, "reader": reader}


async def job_loss(args: argparse.Namespace):
    checks, result = [], {"scenario": "job-loss"}
    with tempfile.TemporaryDirectory() as folder:
        for store, run in (("redis", _loss_on_redis), ("sqlite", _loss_on_sqlite)):
            outcome = await run(args, Path(folder) / store)
            finals, reader = outcome["finals"], outcome["reader"]
            lost = sum(job["state"] != "succeeded" for job in finals)
            attempts = sorted(job["attempts"] for job in finals)
            reads_404 = reader.statuses.get(404, 0)
            result[store] = {
                "jobs": len(finals),
                "lost": lost,
                "attempts": attempts,
                "reads": reader.statuses,
                "reads_while_a_replica_was_down": reader.unreachable,
            }
            print(f"job-loss on {store}: {len(finals)} jobs, lost {lost} (target 0), reads "
                  f"{reader.statuses} (404: {reads_404}, target 0), attempts {attempts}")  # fmt: skip
            checks += [
                Check("job-loss", f"{store}: accepted jobs lost across SIGKILL and SIGTERM",
                      f"{lost} of {len(finals)}", "0", lost == 0),
                Check("job-loss", f"{store}: reads answered 404", f"{reads_404} of "
                      f"{sum(reader.statuses.values())}", "0", reads_404 == 0),
            ]  # fmt: skip
    return result, checks


# ------------------------------------------------------------------ async flood
async def _sync_latencies(client: httpx.AsyncClient, count: int, headers) -> list[float]:
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        response = await client.post("/v1/generate", json=SMALL | {"seed": i}, headers=headers)
        response.raise_for_status()
        latencies.append(time.perf_counter() - started)
    return latencies


async def _async_latencies(client: httpx.AsyncClient, count: int, headers) -> list[float]:
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        response = await client.post(
            "/v1/generate", json=SMALL | {"seed": i}, headers={**headers, **ASYNC}
        )
        response.raise_for_status()
        final = await _finished(client, response.json()["id"], headers)
        assert final["state"] == "succeeded", final
        latencies.append(time.perf_counter() - started)
    return latencies


async def async_flood(args: argparse.Namespace):
    with tempfile.TemporaryDirectory() as folder:
        keys_path, keys = _keys_file(Path(folder), flood=args.flood_jobs, other=8)
        flood = {"Authorization": f"Bearer {keys['flood']}"}
        other = {"Authorization": f"Bearer {keys['other']}"}
        settings = {"api_keys_file": str(keys_path), "max_jobs": str(args.flood_jobs + 8)}
        with Server(models="dit", weights_dir=args.weights_dir, settings=settings) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
                await _sync_latencies(client, 2, other)  # warm-up
                idle_sync = await _sync_latencies(client, args.probes, other)
                idle_async = await _async_latencies(client, args.probes, other)
                backlog = []
                for i in range(args.flood_jobs):
                    response = await client.post(
                        "/v1/generate", json=LONG_JOB | {"seed": i}, headers={**flood, **ASYNC}
                    )
                    response.raise_for_status()
                    backlog.append(response.json()["id"])
                await asyncio.sleep(1.0)  # the backlog's first batch is running
                flood_sync = await _sync_latencies(client, args.probes, other)
                flood_async = await _async_latencies(client, args.probes, other)
                left = [
                    job for job in backlog
                    if (await client.get(f"/v1/jobs/{job}", headers=flood)).json()["state"]
                    in ("queued", "running")
                ]  # fmt: skip
                for job in backlog:
                    await client.delete(f"/v1/jobs/{job}", headers=flood)
    result = {
        "scenario": "async-flood",
        "flood_jobs": args.flood_jobs,
        "flood_jobs_unfinished_after_the_probes": len(left),
        "sync_p95_idle_s": p95(idle_sync),
        "sync_p95_flood_s": p95(flood_sync),
        "async_p95_idle_s": p95(idle_async),
        "async_p95_flood_s": p95(flood_async),
    }
    print(f"async flood: {args.flood_jobs} long jobs of one key ({len(left)} still unfinished "
          f"after the probes); the other key's sync p95 {p95(idle_sync):.3f} s idle, "
          f"{p95(flood_sync):.3f} s flooded; async p95 {p95(idle_async):.3f} s idle, "
          f"{p95(flood_async):.3f} s flooded")  # fmt: skip
    checks = [
        latency_check("async-flood", "(another key, synchronous) during the flood", idle_sync, flood_sync),
        latency_check("two-tenants", "(another key, async job) during the flood", idle_async, flood_async),
    ]  # fmt: skip
    return result, checks


# ----------------------------------------------------------------- queued inputs
def _noise_png(side: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (3, side, side), dtype=np.uint8)
    return encode_image(torch.from_numpy(pixels).float() / 255, "png")[0]


async def _growth_while_queueing(server: Server, files, count: int, warm: bool) -> dict:
    """Peak RSS growth of ``server`` while ``count`` async 1024 px stylize jobs arrive at
    once (and for 5 s after); the jobs are cancelled afterwards."""
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        if warm:
            (await client.post("/v1/stylize", files=files, data={"size": "256"})).raise_for_status()
        footprint = Footprint(server.pid)
        started = await asyncio.gather(
            *(
                client.post("/v1/stylize", files=files, data={"size": "1024"}, headers=ASYNC)
                for _ in range(count)
            )
        )
        accepted = [r.json()["id"] for r in started if r.status_code == 202]
        await asyncio.sleep(5.0)
        growth = footprint.growth_mb()
        after = rss_mb(server.pid)
        for job in accepted:
            await client.delete(f"/v1/jobs/{job}")
    return {"accepted": len(accepted), "rss_before_mb": round(footprint.before_mb),
            "peak_rss_growth_mb": round(growth), "rss_after_mb": round(after)}  # fmt: skip


async def queued_inputs(args: argparse.Namespace):
    """Two shapes. The API alone (a worker published the model's details to the shared
    store, then stopped, so the jobs stay queued): what queued inputs cost, the target.
    One process with its worker: the same plus the worker's batches of 1024 px forwards
    (bounded by ``max_batch_pixels``, not by the queue), reported."""
    photo, painting = _noise_png(1024, 0), _noise_png(512, 1)
    files = [
        ("content", ("p.png", photo, "image/png")),
        ("style", ("s.png", painting, "image/png")),
    ]
    limits = {"key_max_jobs": str(args.queued), "max_jobs": str(args.queued)}
    with tempfile.TemporaryDirectory() as folder:
        shared = limits | {"state_dir": folder}
        with Server(models="adain", weights_dir=args.weights_dir, settings=shared):
            pass  # its worker publishes the model's details to the store
        with Server(models="", weights_dir=args.weights_dir, settings=shared) as api:
            api_only = await _growth_while_queueing(api, files, args.queued, warm=False)
    with Server(models="adain", weights_dir=args.weights_dir, settings=limits) as server:
        with_worker = await _growth_while_queueing(server, files, args.queued, warm=True)
    result = {"scenario": "queued-inputs", "queued": args.queued,
              "upload_kb": round(len(photo) / 1024), "api_only": api_only,
              "with_worker": with_worker}  # fmt: skip
    for label, figures in (("API alone", api_only), ("API + worker", with_worker)):
        print(f"queued inputs ({label}): {figures['accepted']} of {args.queued} 1024 px stylize "
              f"jobs accepted ({len(photo) / 1e6:.1f} MB photos); peak RSS growth "
              f"{figures['peak_rss_growth_mb']} MB, {figures['rss_after_mb']} MB after")  # fmt: skip
    growth = api_only["peak_rss_growth_mb"]
    checks = [
        Check("queued-inputs", f"API peak RSS growth, {args.queued} queued 1024 px jobs",
              f"{growth} MB", "< 1024 MB", growth < 1024),
        Check("queued-inputs", "the same, one process running them (its batches included)",
              f"{with_worker['peak_rss_growth_mb']} MB", "reported", True),
    ]  # fmt: skip
    return result, checks


# ------------------------------------------------------------------ event streams
async def _stream(url: str, job: str, headers, opened: list, refused: list) -> None:
    path = f"{url}/v1/jobs/{job}/events"
    async with (
        httpx.AsyncClient(timeout=None) as client,
        client.stream("GET", path, headers=headers) as stream,
    ):
        if stream.status_code != 200:
            refused.append(stream.status_code)
            return
        opened.append(1)
        async for _ in stream.aiter_lines():
            pass


async def _job_seconds(client: httpx.AsyncClient, headers, seed: int) -> tuple[str, float]:
    response = await client.post(
        "/v1/generate", json=LONG_JOB | {"seed": seed}, headers={**headers, **ASYNC}
    )
    response.raise_for_status()
    job = response.json()["id"]
    final = await _finished(client, job, headers)
    return job, final["running_s"]


async def event_streams(args: argparse.Namespace):
    with tempfile.TemporaryDirectory() as folder:
        keys_path, keys = _keys_file(Path(folder), hog=8, fresh=8)
        hog = {"Authorization": f"Bearer {keys['hog']}"}
        fresh = {"Authorization": f"Bearer {keys['fresh']}"}
        results = {}
        for label, per_key in (("limited", "8"), ("raised", str(args.streams))):
            settings = {"api_keys_file": str(keys_path), "key_max_event_streams": per_key}
            with Server(models="dit", weights_dir=args.weights_dir, settings=settings) as server:
                async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
                    _, alone = await _job_seconds(client, hog, 1)
                    response = await client.post(
                        "/v1/generate", json=LONG_JOB | {"seed": 2}, headers={**hog, **ASYNC}
                    )
                    job = response.json()["id"]
                    opened, refused = [], []
                    streams = []
                    for _ in range(args.streams):  # 100 a second: a burst of connections
                        # all at once would meet max_connections before any stream opens
                        streams.append(
                            asyncio.create_task(_stream(server.url, job, hog, opened, refused))
                        )
                        await asyncio.sleep(0.01)
                    await asyncio.sleep(2.0)
                    answers = []
                    for _ in range(20):
                        for path in ("/healthz", "/readyz", "/v1/me"):
                            try:
                                answers.append((await client.get(path, headers=fresh)).status_code)
                            except httpx.TransportError:
                                answers.append(None)
                    final = await _finished(client, job, hog)
                    await asyncio.gather(*streams, return_exceptions=True)
            results[label] = {
                "streams_opened": len(opened),
                "streams_refused": sorted(set(refused)),
                "fresh_success": sum(a == 200 for a in answers) / len(answers),
                "job_s_alone": alone,
                "job_s_with_streams": final["running_s"],
            }
    for label, figures in results.items():
        print(f"event streams ({label} per-key limit): {figures}")
    limited, raised = results["limited"], results["raised"]
    slowdown = raised["job_s_with_streams"] / raised["job_s_alone"]
    checks = [
        Check("event-streams", f"fresh clients served, one key asking {args.streams} streams",
              f"{100 * limited['fresh_success']:.0f} % ({limited['streams_opened']} opened, "
              f"the rest {limited['streams_refused']})", "100 %", limited["fresh_success"] == 1.0),
        Check("event-streams", f"fresh clients served, {raised['streams_opened']} streams open",
              f"{100 * raised['fresh_success']:.0f} %", "100 %", raised["fresh_success"] == 1.0),
        Check("event-streams", f"a job's time with {raised['streams_opened']} streams / alone",
              f"{slowdown:.2f}x", "reported", True),
    ]  # fmt: skip
    return {"scenario": "event-streams", **results}, checks


# ------------------------------------------------------------------ result reads
_PROBE = """
import json, sys, time, httpx
with httpx.Client(timeout=60) as client:
    latencies = []
    for _ in range(int(sys.argv[2])):
        started = time.perf_counter()
        client.get(sys.argv[1] + "/healthz").raise_for_status()
        latencies.append(time.perf_counter() - started)
        time.sleep(0.02)
print(json.dumps(latencies))
"""


async def probe_latencies(url: str, count: int) -> list[float]:
    """``/healthz`` latencies from a process of its own (the reading client's event loop
    and interpreter must not be part of what is measured)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _PROBE, url, str(count), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate()
    return json.loads(out)


async def raw_get(url: str, path: str) -> int:
    """GET ``path`` and read the whole answer without parsing it (a load generator that
    leaves the CPU to the server); returns the body's length."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    size = 0
    while chunk := await reader.read(1 << 20):
        size += len(chunk)
    writer.close()
    return size


async def result_reads(args: argparse.Namespace):
    photo, painting = _noise_png(1024, 2), _noise_png(512, 3)
    files = [
        ("content", ("p.png", photo, "image/png")),
        ("style", ("s.png", painting, "image/png")),
    ]
    with Server(models="adain", weights_dir=args.weights_dir) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
            response = await client.post(
                "/v1/stylize", files=files, data={"size": "1024"}, headers=ASYNC
            )
            job = response.json()["id"]
            await _finished(client, job)
            size = len((await client.get(f"/v1/jobs/{job}")).content)
            idle = await probe_latencies(server.url, args.probes * 4)
            loaded = []
            for _ in range(args.probes):
                reads = asyncio.gather(  # raw reads: the readers' parsing is not the server's
                    *(raw_get(server.url, f"/v1/jobs/{job}") for _ in range(args.readers))
                )
                loaded += await probe_latencies(server.url, 4)
                await reads
    print(f"result reads: {args.readers} concurrent GETs of a {size / 1e6:.1f} MB job answer; "
          f"/healthz p95 {p95(idle) * 1000:.1f} ms idle, {p95(loaded) * 1000:.1f} ms meanwhile")  # fmt: skip
    result = {"scenario": "result-reads", "answer_bytes": size, "healthz_p95_idle_s": p95(idle),
              "healthz_p95_reads_s": p95(loaded)}  # fmt: skip
    return result, [
        latency_check(
            "result-reads", f"(/healthz) during {args.readers} result reads", idle, loaded
        )
    ]


# ---------------------------------------------------------------- queue overhead
async def queue_overhead(args: argparse.Namespace):
    one = {"prompt": "a red circle", "steps": 1, "seed": 1}
    results, checks = {}, []
    with tempfile.TemporaryDirectory() as folder:
        redis = _redis_server_class()(Path(folder) / "redis").start()
        try:
            for store, settings in (("redis", {"redis_url": redis.url}), ("sqlite", {})):
                with Server(
                    models="dit", weights_dir=args.weights_dir, settings=settings
                ) as server:
                    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
                        for _ in range(5):  # warm-up, both paths
                            await client.post("/v1/generate", json=one)
                            await client.post(
                                "/v1/generate",
                                json=one,
                                headers={"Idempotency-Key": uuid.uuid4().hex},
                            )
                        local, queued = [], []
                        for i in range(args.pairs):
                            paths = [(local, {}), (queued, {"Idempotency-Key": uuid.uuid4().hex})]
                            for latencies, headers in paths if i % 2 else paths[::-1]:
                                started = time.perf_counter()
                                (
                                    await client.post("/v1/generate", json=one, headers=headers)
                                ).raise_for_status()
                                latencies.append(time.perf_counter() - started)
                overhead_ms = (statistics.median(queued) - statistics.median(local)) * 1000
                # each pair's two requests ran back to back: their difference leaves out
                # most of the machine's load, which moves both alike
                differences = [a - b for a, b in zip(queued, local, strict=True)]
                paired_ms = statistics.median(differences) * 1000
                results[store] = {"local_median_ms": statistics.median(local) * 1000,
                                  "queued_median_ms": statistics.median(queued) * 1000,
                                  "overhead_ms": overhead_ms, "paired_overhead_ms": paired_ms}  # fmt: skip
                print(f"queue overhead on {store}: local {results[store]['local_median_ms']:.1f} ms, "
                      f"through the queue {results[store]['queued_median_ms']:.1f} ms: "
                      f"+{overhead_ms:.1f} ms per job (target < 5); median of the pairs' "
                      f"differences +{paired_ms:.1f} ms")  # fmt: skip
                checks.append(Check("queue-overhead", f"median cost of the queue per job ({store})",
                                    f"{overhead_ms:.1f} ms", "< 5 ms", overhead_ms < 5))  # fmt: skip
        finally:
            redis.stop()
    return {"scenario": "queue-overhead", **results}, checks


# ---------------------------------------------------------------------- previews
PREVIEW_PROMPT = "two green triangles and a yellow circle"


async def _job_with_events(
    client: httpx.AsyncClient, pid: int, kind: str, previews: bool, args: argparse.Namespace, files
) -> dict:
    """One async job, followed on its event stream to ``done``: the wall time, the job's
    ``running_s``, the server's CPU seconds meanwhile, the previews the stream sent and
    the result file's SHA-256."""
    cpu = cpu_seconds(pid)
    started = time.perf_counter()
    if kind == "generate":
        body = {"prompt": PREVIEW_PROMPT, "steps": args.preview_steps, "seed": 7}
        response = await client.post(
            "/v1/generate", json=body | ({"previews": True} if previews else {}), headers=ASYNC
        )
    else:
        data = {"size": str(args.preview_size)} | ({"previews": "true"} if previews else {})
        response = await client.post("/v1/stylize", files=files, data=data, headers=ASYNC)
    response.raise_for_status()
    job = response.json()["id"]
    shown = 0
    async with client.stream("GET", f"/v1/jobs/{job}/events") as stream:
        async for line in stream.aiter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
                shown += event == "preview"
                if event in ("done", "gone"):
                    break
    wall = time.perf_counter() - started
    cpu = cpu_seconds(pid) - cpu
    final = await _finished(client, job)
    if final["state"] != "succeeded":
        raise RuntimeError(f"{kind} job {final['state']}: {final['error']}")
    result = (await client.get(f"/v1/jobs/{job}/result")).content
    return {
        "wall_s": wall,
        "running_s": final["running_s"],
        "cpu_s": cpu,
        "previews": shown,
        "sha256": hashlib.sha256(result).hexdigest(),
    }


def _preview_cost_ms(side: int, repeats: int = 20) -> float:
    """Median milliseconds of one preview (shrink and JPEG) of a ``side`` px picture (the
    largest stage a ``2 * side`` px job previews; its last stage is the result)."""
    from service.execution.previews import preview_jpeg

    picture = torch.rand(3, side, side * 3 // 2 if side > 64 else side)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        preview_jpeg(picture)
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


async def previews(args: argparse.Namespace):
    """Previews on vs off, interleaved (see the module docstring)."""
    costs = {"stage_ms": _preview_cost_ms(args.preview_size), "estimate_ms": _preview_cost_ms(32)}
    print(
        f"one preview on the model's thread: {costs['stage_ms']:.1f} ms of a "
        f"{args.preview_size} px stage (a {2 * args.preview_size} px job's largest), "
        f"{costs['estimate_ms']:.1f} ms of a 32 px estimate (two a second at most: "
        f"<= {costs['stage_ms'] / 5:.2f} % of the thread's time)"
    )
    files = [
        ("content", ("photo.png", _noise_png(args.preview_size, 1), "image/png")),
        ("style", ("style.png", _noise_png(256, 2), "image/png")),
    ]
    runs: dict[str, dict[bool, list[dict]]] = {
        kind: {False: [], True: []} for kind in ("stylize", "generate")
    }
    with Server(models="adain,dit", weights_dir=args.weights_dir) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
            for kind in runs:  # warm up: the first job of each kind pays for lazy setup
                await _job_with_events(client, server.pid, kind, True, args, files)
            for round_ in range(args.preview_rounds):
                for kind, by in runs.items():
                    order = (False, True) if round_ % 2 == 0 else (True, False)
                    for on in order:
                        run = await _job_with_events(client, server.pid, kind, on, args, files)
                        by[on].append(run)
    results: dict[str, dict] = {}
    checks = []
    for kind, by in runs.items():
        off, on = by[False], by[True]
        pairs = [b["wall_s"] / a["wall_s"] for a, b in zip(off, on, strict=True)]
        running = [b["running_s"] / a["running_s"] for a, b in zip(off, on, strict=True)]
        cpu = statistics.median(r["cpu_s"] for r in on) / statistics.median(r["cpu_s"] for r in off)
        figures = {
            "wall_s_off": [round(r["wall_s"], 3) for r in off],
            "wall_s_on": [round(r["wall_s"], 3) for r in on],
            "ratio_wall_median": statistics.median(pairs),
            "ratio_running_median": statistics.median(running),
            "ratio_server_cpu_of_medians": cpu,
            "server_cpu_s_off": [round(r["cpu_s"], 2) for r in off],
            "server_cpu_s_on": [round(r["cpu_s"], 2) for r in on],
            "ratio_of_medians": statistics.median(r["wall_s"] for r in on)
            / statistics.median(r["wall_s"] for r in off),
            "previews_on": [r["previews"] for r in on],
            "previews_off": [r["previews"] for r in off],
            "same_result": len({r["sha256"] for r in off + on}) == 1,
        }
        results[kind] = figures
        print(
            f"previews, {kind}: on/off = {figures['ratio_wall_median']:.3f} (median of "
            f"{len(pairs)} interleaved pairs, submit to done; running_s "
            f"{figures['ratio_running_median']:.3f}; the server's CPU seconds {cpu:.3f}); "
            f"off {figures['wall_s_off']} s, on "
            f"{figures['wall_s_on']} s; previews sent {figures['previews_on']} (on), "
            f"{figures['previews_off']} (off); same result: {figures['same_result']}"
        )
        ratio = figures["ratio_wall_median"]
        checks += [
            Check("previews", f"{kind} job with previews on / off", f"{ratio:.3f}x",
                  "<= 1.10x", ratio <= 1.10),
            Check("previews", f"{kind}: the server's CPU seconds a job, on / off",
                  f"{cpu:.3f}x", "reported", True),
            Check("previews", f"{kind}: previews sent on / off",
                  f"{min(figures['previews_on'])}-{max(figures['previews_on'])} / "
                  f"{max(figures['previews_off'])}", ">= 1 / 0",
                  min(figures["previews_on"]) >= 1 and max(figures["previews_off"]) == 0),
            Check("previews", f"{kind}: the same result on and off",
                  str(figures["same_result"]), "True", figures["same_result"]),
        ]  # fmt: skip
    return {"scenario": "previews", "one_preview": costs, **results}, checks


SCENARIOS = {
    "job-loss": job_loss,
    "async-flood": async_flood,
    "queued-inputs": queued_inputs,
    "event-streams": event_streams,
    "result-reads": result_reads,
    "queue-overhead": queue_overhead,
    "previews": previews,
}


FLAGS = FlagGroup(
    "job scenarios",
    {
        "--loss-jobs": (8, "jobs in flight in job-loss"),
        "--flood-jobs": (64, "one key's async backlog"),
        "--queued": (64, "queued 1024 px stylize jobs"),
        "--streams": (200, "event streams of one key"),
        "--readers": (64, "concurrent result reads"),
        "--pairs": (30, "queue-overhead request pairs"),
        "--preview-rounds": (10, "previews on/off pairs"),
        "--preview-size": (512, "previews' stylize size"),
        "--preview-steps": (100, "previews' DiT steps"),
    },
)


__all__ = ["FLAGS", "SCENARIOS"]

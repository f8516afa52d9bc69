"""What ``atelier-client`` adds per call over raw ``httpx``, against a local server.

    python benchmarks/client_overhead.py [--pairs 200]

Starts ``atelier serve`` with the DiT (``benchmarks/serve_process.py``) and times, in
interleaved pairs on one warm connection each, the same request made with a plain
``httpx.Client`` (the body built by hand, the answer parsed with ``.json()``) and with
``atelier_client.Client`` (options checked, an ``Idempotency-Key``, the retry wrapper,
the answer turned into typed records and image bytes):

* ``job``: ``GET /v1/jobs/{id}`` of a finished one-image job;
* ``jobs``: ``GET /v1/jobs`` (a page of 20);
* ``generate``: ``POST /v1/generate``, one 32 px image at one sampler step, answered
  at once (the model's time is in both sides of the pair), both with an
  ``Idempotency-Key`` (the client sends one on every POST; the server then runs the
  request through its job store, a cost of the key on the server, not of the client).

Prints, per call, the median time of each and the median of the pairs' differences
(the client's overhead), as JSON lines, then the target (< 5 ms) and whether each met it.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import time
import uuid
from collections.abc import Callable

import httpx
from atelier_client import Client
from serve_process import Server  # run as a script: its folder is on sys.path

TARGET_MS = 5.0


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def measure(
    pairs: int, raw: Callable[[], object], client: Callable[[], object]
) -> dict[str, float]:
    """Interleaved pairs (the order alternates); medians in ms."""
    for _ in range(5):  # warm both paths
        raw(), client()
    raw_ms, client_ms, differences = [], [], []
    for index in range(pairs):
        if index % 2:
            c, r = _timed(client), _timed(raw)
        else:
            r, c = _timed(raw), _timed(client)
        raw_ms.append(r)
        client_ms.append(c)
        differences.append(c - r)
    return {
        "raw_httpx_ms": round(statistics.median(raw_ms), 3),
        "client_ms": round(statistics.median(client_ms), 3),
        "overhead_ms": round(statistics.median(differences), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=200)
    args = parser.parse_args()
    with Server(models="dit", max_batch_wait_ms=0) as server:
        http = httpx.Client(base_url=server.url, timeout=60)
        client = Client(server.url)
        body = {"prompt": "a red circle", "steps": 1, "seed": 1}
        job = client.wait(client.submit_generate("a red circle", steps=1, seed=1))

        def raw_generate() -> list[bytes]:
            # the same request on the wire as the client's: with an Idempotency-Key, which
            # the server answers through its job store (its cost is the server's, measured
            # by benchmarks/job_faults.py --scenario queue-overhead, not the client's)
            key = {"Idempotency-Key": uuid.uuid4().hex}
            answer = http.post("/v1/generate", json=body, headers=key)
            answer.raise_for_status()
            return [base64.b64decode(image) for image in answer.json()["images"]]

        calls = {
            "job": (
                lambda: http.get(f"/v1/jobs/{job.id}").raise_for_status().json(),
                lambda: client.job(job.id),
            ),
            "jobs": (
                lambda: http.get("/v1/jobs").raise_for_status().json(),
                lambda: client.jobs(),
            ),
            "generate": (raw_generate, lambda: client.generate("a red circle", steps=1, seed=1)),
        }
        results = {}
        for name, (raw, wrapped) in calls.items():
            pairs = args.pairs if name != "generate" else max(20, args.pairs // 4)
            results[name] = measure(pairs, raw, wrapped) | {"pairs": pairs}
            print(json.dumps({"call": name, **results[name]}), flush=True)
        http.close()
        client.close()
    worst = max(result["overhead_ms"] for result in results.values())
    print(
        json.dumps(
            {"target_overhead_ms": TARGET_MS, "worst_overhead_ms": worst, "met": worst < TARGET_MS}
        )
    )


if __name__ == "__main__":
    main()

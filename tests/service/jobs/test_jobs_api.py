"""The job API in one process (fake models): cancel and delete, priority of waiting
clients over async backlogs, admission before decoding, bounded queues, body caps.

Long work is long by construction: the fakes' step gate holds a batch at a step."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter

import corpus
import pytest
from api_headers import ASYNC
from service_fakes import FakeTextToImage, wait_until

from service.execution import executor
from service.routes import jobs as job_routes

pytestmark = pytest.mark.timeout(60)


def _events(client, job_id: str) -> list[str]:
    with client.stream("GET", f"/v1/jobs/{job_id}/events") as stream:
        return [
            line.split(":", 1)[1].strip()
            for line in stream.iter_lines()
            if line.startswith("event:")
        ]


def _counted(store, *names: str) -> Counter[str]:
    """Count the calls of the store's methods ``names`` from now on."""
    calls: Counter[str] = Counter()
    for name in names:

        async def counted(*args, _name=name, _call=getattr(store, name), **kwargs):
            calls[_name] += 1
            return await _call(*args, **kwargs)

        setattr(store, name, counted)
    return calls


def _on_redis(request) -> dict[str, str]:
    url = request.getfixturevalue("redis_server").url
    return {"redis_url": url, "redis_prefix": f"wait-{uuid.uuid4().hex[:8]}:"}


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_request_waiting_for_a_job_run_here_costs_a_create_and_a_finish(
    client_factory, backend, request, monkeypatch
):
    """A synchronous request through the queue (an ``Idempotency-Key``) on a replica
    whose worker has room costs the store one create and one finish: the create leases
    the job to this worker (no claim), the request does not read the job it just
    created, and it gets the result from the finish that wrote it."""
    monkeypatch.setattr(executor, "REREAD_S", 600.0)  # no re-read for a slow machine
    client = client_factory(**(_on_redis(request) if backend == "redis" else {}))
    store = client.app.state.store
    if backend == "redis":
        assert client.portal.call(store.listening)
    warm_up = client.post("/v1/generate", json={"prompt": "a"}, headers={"Idempotency-Key": "w"})
    assert warm_up.status_code == 200
    calls = _counted(store, "create", "get", "claim", "finish", "result")
    body = {"prompt": "a red circle", "steps": 3, "seed": 2}
    queued = client.post("/v1/generate", json=body, headers={"Idempotency-Key": "k"})
    assert queued.status_code == 200
    assert queued.json()["images"] == client.post("/v1/generate", json=body).json()["images"]
    assert dict(calls) == {"create": 1, "finish": 1}


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_job_writes_its_first_progress_an_interval_after_it_starts(
    client_factory, fakes, backend, request
):
    """No progress write before ``job_progress_interval_s`` has passed since the job
    started: a job that ends sooner writes none (its finish sets ``step = total``); a
    job held at a step writes its progress once the interval has passed."""

    def settings() -> dict[str, str]:  # each client its own jobs
        return _on_redis(request) if backend == "redis" else {}

    client = client_factory(job_progress_interval_s=600.0, **settings())
    client.post("/v1/generate", json={"prompt": "warm up"})
    calls = _counted(client.app.state.store, "set_progress")
    short = client.post("/v1/generate", json={"prompt": "a", "steps": 3}, headers=ASYNC).json()
    assert _events(client, short["id"])[-1] == "done"
    final = client.get(f"/v1/jobs/{short['id']}").json()
    assert final["progress"]["step"] == final["progress"]["total"] == 3
    assert calls["set_progress"] == 0

    interval = 0.3
    client = client_factory(job_progress_interval_s=interval, **settings())
    client.post("/v1/generate", json={"prompt": "warm up"})
    written: list[float] = []
    set_progress = client.app.state.store.set_progress

    async def timed(*args, **kwargs):
        written.append(time.monotonic())
        return await set_progress(*args, **kwargs)

    client.app.state.store.set_progress = timed
    model = fakes.dit["cpu"]
    model.step_gate = threading.Semaphore(2)  # steps 0 and 1 run (step 1 reported), 2 waits
    before_submit = time.monotonic()
    held = client.post("/v1/generate", json={"prompt": "b", "steps": 4}, headers=ASYNC).json()
    wait_until(lambda: client.get(f"/v1/jobs/{held['id']}").json()["progress"]["step"] == 1)
    assert written[0] - before_submit >= interval
    assert client.get(f"/v1/jobs/{held['id']}").json()["state"] == "running"
    for _ in range(10):
        model.step_gate.release()
    model.step_gate = None
    assert _events(client, held["id"])[-1] == "done"


def test_a_waiting_request_past_the_workers_room_queues_its_job(client_factory, fakes):
    """With the worker's interactive room full (``queue_size`` 1), the next waiting
    request's job waits in the store's queue (not on a batcher queue it would overflow),
    and runs when the room frees."""
    client = client_factory(queue_size=1, max_batch_size=1, max_batch_wait_ms=0.0)
    client.post("/v1/generate", json={"prompt": "warm up"})
    model = fakes.dit["cpu"]
    model.step_gate = threading.Semaphore(1)  # the first job's step 0 runs, step 1 waits
    before = len(model.step_rows)
    answers: dict[str, object] = {}

    def wait_for(name: str, seed: int) -> None:
        body = {"prompt": "a", "steps": 2, "seed": seed}
        answers[name] = client.post("/v1/generate", json=body, headers={"Idempotency-Key": name})

    first = threading.Thread(target=wait_for, args=("first", 1))
    first.start()
    assert model.wait_for_steps(before + 1)
    second = threading.Thread(target=wait_for, args=("second", 2))
    second.start()
    store = client.app.state.store
    wait_until(lambda: client.portal.call(store.queue_depths).get("dit") == 1)
    for _ in range(10):
        model.step_gate.release()
    model.step_gate = None
    first.join(10)
    second.join(10)
    assert answers["first"].status_code == answers["second"].status_code == 200


def test_a_request_waiting_for_a_job_run_elsewhere_reads_only_its_result(
    client_factory, request, monkeypatch
):
    """On an API replica without models, a synchronous request's job runs on another
    replica's worker; woken by its finish, the request reads the result once, and never
    the job's record."""
    monkeypatch.setattr(executor, "REREAD_S", 600.0)  # no re-read for a slow machine
    shared = _on_redis(request)
    api, worker = client_factory(**shared, load_models=""), client_factory(**shared)
    for client in (api, worker):
        assert client.portal.call(client.app.state.store.listening)
    calls = _counted(api.app.state.store, "get", "result")
    body = {"prompt": "a red circle", "steps": 3, "seed": 2}
    queued = api.post("/v1/generate", json=body)
    assert queued.status_code == 200
    assert queued.json()["images"] == worker.post("/v1/generate", json=body).json()["images"]
    assert (calls["get"], calls["result"]) == (0, 1)


def test_delete_answers_the_stopped_job_and_then_forgets_a_finished_one(client, fakes):
    client.post("/v1/generate", json={"prompt": "warm up"})
    model = fakes.dit["cpu"]
    model.step_gate = threading.Semaphore(1)  # step 0 runs, step 1 waits
    before = len(model.step_rows)
    job = client.post("/v1/generate", json={"prompt": "slow", "steps": 50}, headers=ASYNC).json()
    assert model.wait_for_steps(before + 1)
    stopped = client.delete(f"/v1/jobs/{job['id']}")
    assert stopped.status_code == 200
    assert stopped.json()["state"] == "cancelled"  # the state after the cancel, not before
    for _ in range(60):
        model.step_gate.release()
    model.step_gate = None
    gone = client.delete(f"/v1/jobs/{job['id']}")
    assert gone.status_code == 204  # a finished job is forgotten, result and all
    assert client.get(f"/v1/jobs/{job['id']}").status_code == 404


def test_a_cancel_while_the_result_is_stored_leaves_the_job_succeeded(client_factory, monkeypatch):
    """A DELETE that lands while the worker writes the job's result does not stop that
    write: the job ends succeeded with its result (a stop then would leave it running,
    its result half handled, until its lease ran out)."""
    monkeypatch.setattr(job_routes, "CANCEL_WAIT_S", 0.2)
    client = client_factory()
    store = client.app.state.store
    storing, release = threading.Event(), threading.Event()
    real_finish = store.finish

    async def held_finish(job_id, state, **outcome):
        if outcome.get("result") is not None:
            storing.set()
            while not release.is_set():
                await asyncio.sleep(0.01)
        return await real_finish(job_id, state, **outcome)

    store.finish = held_finish
    job = client.post("/v1/generate", json={"prompt": "a circle"}, headers=ASYNC).json()
    assert storing.wait(30)
    asked = client.delete(f"/v1/jobs/{job['id']}")
    assert asked.status_code == 202 and asked.json()["cancel_requested"]
    release.set()
    wait_until(lambda: client.get(f"/v1/jobs/{job['id']}").json()["state"] != "running")
    done = client.get(f"/v1/jobs/{job['id']}").json()
    assert done["state"] == "succeeded" and len(done["result"]["images"]) == 1


def test_repeated_prefer_headers_combine(client):
    response = client.post(
        "/v1/generate",
        json={"prompt": "a cat"},
        headers=[("Prefer", "wait=10"), ("Prefer", "respond-async")],
    )
    assert response.status_code == 202
    assert response.headers["preference-applied"] == "respond-async"


def test_a_waiting_client_runs_between_the_steps_of_an_async_batch(client_factory, fakes):
    """An async job's batch yields the device at its next step to a synchronous request,
    which finishes before the batch takes another step."""
    client = client_factory(max_batch_wait_ms=0.0)
    model = fakes.dit["cpu"]
    model.step_gate = threading.Semaphore(1)
    model.gate_only = "background"
    job = client.post("/v1/generate", json={"prompt": "a", "steps": 6}, headers=ASYNC).json()
    wait_until(lambda: ("background", 0) in model.steps_by)
    answer = {}
    waiting = threading.Thread(
        target=lambda: answer.update(
            r=client.post("/v1/generate", json={"prompt": "b", "steps": 3, "seed": 5})
        )
    )
    waiting.start()
    gate = client.app.state.pools["dit"].batchers["cpu"]["interactive"]._gate
    wait_until(lambda: gate.waiting(0) == 1)  # the request waits for the step in flight
    model.step_gate.release()  # background step 0 ends; at step 1 it yields
    waiting.join(10)
    for _ in range(10):
        model.step_gate.release()
    model.step_gate = None
    assert answer["r"].status_code == 200
    assert _events(client, job["id"])[-1] == "done"
    order = model.steps_by
    first = order.index(("interactive", 0))
    assert order[:first] == [("background", 0)]  # the batch paused after the step in flight
    assert order[first : first + 4] == [*(("interactive", i) for i in range(3)), ("background", 1)]


def test_admission_refuses_before_decoding_the_uploads(client_factory, fakes):
    client = client_factory(key_max_jobs=1)
    client.post("/v1/generate", json={"prompt": "w"})
    fakes.dit["cpu"].step_gate = threading.Semaphore(0)
    held = client.post("/v1/generate", json={"prompt": "a", "steps": 5}, headers=ASYNC)
    assert held.status_code == 202
    refused = client.post(
        "/v1/stylize",
        files=[("content", b"not an image at all"), ("style", corpus.png(16, 16))],
        headers=ASYNC,
    )
    # 429 (the key holds its one job), not 400: nothing was decoded
    assert refused.status_code == 429 and "Retry-After" in refused.headers
    assert "max_jobs" in refused.json()["error"]["message"]
    client.delete(f"/v1/jobs/{held.json()['id']}")
    for _ in range(10):
        fakes.dit["cpu"].step_gate.release()
    fakes.dit["cpu"].step_gate = None


def test_accepted_jobs_never_fail_because_a_batcher_queue_is_full(client_factory, fakes):
    """More accepted jobs than the batchers hold: the runner only claims what fits, so
    every 202 ends in success (none in a late 'overloaded')."""
    client = client_factory(queue_size=1, max_batch_size=1, max_batch_wait_ms=0.0)
    jobs = [
        client.post(
            "/v1/generate", json={"prompt": "a", "seed": i, "steps": 2}, headers=ASYNC
        ).json()
        for i in range(6)
    ]
    for job in jobs:
        assert _events(client, job["id"])[-1] == "done"
        final = client.get(f"/v1/jobs/{job['id']}").json()
        assert final["state"] == "succeeded", final["error"]


def test_a_json_body_over_its_cap_is_refused_before_it_is_parsed(client):
    nested = b'{"prompt": "a cat", "junk": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    declared = client.post(
        "/v1/generate", content=nested, headers={"Content-Type": "application/json"}
    )
    assert declared.status_code == 413
    assert declared.json()["error"]["code"] == "payload_too_large"

    def chunks():  # no Content-Length: the cap holds while the body streams in
        for _ in range(8):
            yield b"[" * 20_000

    streamed = client.post(
        "/v1/generate", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert streamed.status_code == 413


def test_job_results_are_the_synchronous_answers(client):
    sync = client.post("/v1/generate", json={"prompt": "a red circle", "seed": 3}).json()
    job = client.post(
        "/v1/generate", json={"prompt": "a red circle", "seed": 3}, headers=ASYNC
    ).json()
    assert _events(client, job["id"])[-1] == "done"
    result = client.get(f"/v1/jobs/{job['id']}").json()["result"]
    assert result["images"] == sync["images"]
    assert result["parameters"] == sync["parameters"]
    assert FakeTextToImage.image_size == 8


def test_an_async_stylize_keeps_its_style_scale(client, fakes):
    response = client.post(
        "/v1/stylize",
        files=[("content", corpus.png(24, 20)), ("style", corpus.png(16, 16))],
        data={"style_scale": "1.5"},
        headers=ASYNC,
    )
    assert response.status_code == 202
    assert _events(client, response.json()["id"])[-1] == "done"
    assert fakes.adain["cpu"].style_scales[-1] == 1.5
    final = client.get(f"/v1/jobs/{response.json()['id']}").json()
    assert final["result"]["parameters"]["style_scale"] == 1.5

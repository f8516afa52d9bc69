"""Request lifecycle: cancellation, the cost budget, async jobs and SSE, PNG parameters."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading

import corpus
import numpy as np
import pytest
import torch
from PIL import Image
from service_fakes import FakeTextToImage, make_settings

from models.adain.presets import get_preset
from models.shapes.understand import understand
from service.errors import ClientClosedRequest, DeadlineExceeded
from service.execution.executor import unless_gone
from service.metrics import Metrics
from service.model_types import GenerateOptions
from service.routes.deps import disconnected
from service.workers.pool import WorkerPool
from service.workers.text_to_image import GenerateJob, run_generate

pytestmark = pytest.mark.timeout(60)


def _job(seed: int, steps: int = 4) -> GenerateJob:
    options = GenerateOptions(steps, 3.0, "ddim", True)
    return GenerateJob(understand("a cat"), None, seed, options, 32)


def _expected(seed: int) -> torch.Tensor:
    return torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(seed))


async def _thread_wait(predicate) -> None:
    assert await asyncio.get_running_loop().run_in_executor(None, predicate)


def _pool(model, metrics=None, **settings) -> WorkerPool:
    options = {"max_batch_size": 3, "max_batch_wait_ms": 10_000.0} | settings
    return WorkerPool(
        "dit", {"cpu": model}, run_generate, make_settings(**options), metrics or Metrics()
    )


@pytest.fixture
def gated_model() -> FakeTextToImage:
    """A fake text-to-image model whose step 0 runs and whose step 1 waits for a permit
    of its ``step_gate`` (a test cancels an image there, then releases it)."""
    model = FakeTextToImage()
    model.step_gate = threading.Semaphore(1)  # step 0 runs, step 1 waits for a permit
    return model


def test_a_cancelled_image_stops_at_the_next_step_and_its_batch_mates_finish(gated_model):
    metrics = Metrics()

    async def scenario():
        pool = _pool(gated_model, metrics)
        pool.start()
        tasks = [asyncio.ensure_future(pool.submit(_job(seed))) for seed in (1, 2, 3)]
        await _thread_wait(lambda: gated_model.wait_for_steps(1))
        tasks[1].cancel()
        await asyncio.sleep(0)  # let the cancellation reach the batcher
        for _ in range(10):
            gated_model.step_gate.release()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await pool.close()
        return results

    first, second, third = asyncio.run(scenario())
    assert isinstance(second, asyncio.CancelledError)
    torch.testing.assert_close(first, _expected(1))
    torch.testing.assert_close(third, _expected(3))
    # one batch of three; the cancelled row is gone from every step after the cancel:
    # 3 + 2 + 2 + 2 item-steps of work
    assert gated_model.step_rows == [[0, 1, 2], [0, 2], [0, 2], [0, 2]]
    text = metrics.render().decode()
    assert 'atelier_work_units_total{device="cpu",model="dit"} 9.0' in text
    assert 'reason="caller_gone",stage="running"} 1.0' in text


def test_an_image_past_its_deadline_stops_during_its_forward(gated_model):
    async def scenario():
        pool = _pool(gated_model, max_batch_size=1)
        pool.start()
        task = asyncio.ensure_future(pool.submit(_job(5, steps=50), timeout_s=0.05))
        await _thread_wait(lambda: gated_model.wait_for_steps(1))
        with pytest.raises(DeadlineExceeded):
            await task  # the route's clock runs out while step 1 waits
        for _ in range(60):
            gated_model.step_gate.release()
        await pool.close()

    asyncio.run(scenario())
    assert gated_model.step_rows == [[0]]


class _GatedEncoder:
    """A text encoder that records the texts it is asked for and waits for ``gate``."""

    def __init__(self, inner):
        self.inner = inner
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.texts: list[str] = []

    def encode(self, prompts):
        self.texts += prompts
        self.entered.set()
        assert self.gate.wait(10)
        return self.inner.encode(prompts)


@pytest.fixture
def tiny_text_to_image():
    from models.dit.config import get_preset
    from models.dit.model import DiT
    from models.dit.pipeline import TextToImage
    from models.text_encoder import HashedWordEncoder

    torch.manual_seed(0)
    model = DiT(get_preset("tiny"))
    return TextToImage(model, HashedWordEncoder(model.config.text_dim), default_steps=3)


#: one object each (one region), told apart by colour in what the encoder sees
COLOURS = ("red", "blue", "green")


def _colour_job(colour: str) -> GenerateJob:
    options = GenerateOptions(3, 3.0, "ddim", True)
    return GenerateJob(understand(f"a {colour} circle"), None, 11, options, 32)


def _alone(pipe, job: GenerateJob) -> torch.Tensor:
    return pipe.sample([job.prompt], job.options, seeds=[job.seed])[0]


def _cancel_during_encoding(pipe, jobs, *, first: int, cancel: int, metrics=None, **settings):
    """Submit ``jobs[:first]``; once their forward is inside the (gated) text encoder,
    submit the rest, cancel ``jobs[cancel]``, then let the encoder go on. Returns each
    job's result or exception, and the encoder (which recorded the texts it saw)."""
    encoder = pipe.encoder = _GatedEncoder(pipe.encoder)

    async def scenario():
        pool = _pool(pipe, metrics, **settings)
        pool.start()
        tasks = [asyncio.ensure_future(pool.submit(job)) for job in jobs[:first]]
        await _thread_wait(lambda: encoder.entered.wait(10))
        tasks += [asyncio.ensure_future(pool.submit(job)) for job in jobs[first:]]
        await asyncio.sleep(0)  # the rest are queued
        tasks[cancel].cancel()
        while not tasks[cancel].done():  # its batcher item is abandoned once it is done
            await asyncio.sleep(0)
        encoder.gate.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await pool.close()
        return results

    return asyncio.run(scenario()), encoder


def test_an_image_cancelled_while_queued_never_reaches_the_text_encoder(tiny_text_to_image):
    """The batcher drops it before its batch's forward: no planning, no encoding."""
    pipe = tiny_text_to_image
    jobs = [_colour_job(colour) for colour in COLOURS]
    # red holds the worker (batches of one); blue and green queue; green is cancelled
    (red, blue, green), encoder = _cancel_during_encoding(
        pipe, jobs, first=1, cancel=2, max_batch_size=1, max_batch_wait_ms=0.0
    )
    assert isinstance(green, asyncio.CancelledError)
    assert not any("green" in text for text in encoder.texts)
    assert any("blue" in text for text in encoder.texts)
    torch.testing.assert_close(red, _alone(pipe, jobs[0]))
    torch.testing.assert_close(blue, _alone(pipe, jobs[1]))


def test_an_image_cancelled_during_text_encoding_runs_no_sampler_step(tiny_text_to_image):
    """Its batch's forward had started: the encoding is spent, then the sampler's first
    step check drops it before any model evaluation; its batch-mates are unchanged."""
    pipe = tiny_text_to_image
    jobs = [_colour_job(colour) for colour in COLOURS]
    metrics = Metrics()
    (red, blue, green), encoder = _cancel_during_encoding(
        pipe, jobs, first=3, cancel=1, metrics=metrics, max_batch_size=3
    )
    assert isinstance(blue, asyncio.CancelledError)
    assert any("blue" in text for text in encoder.texts)  # the encoding was spent
    text = metrics.render().decode()
    # 2 images x 3 steps: blue ran none
    assert 'atelier_work_units_total{device="cpu",model="dit"} 6.0' in text
    assert 'reason="caller_gone",stage="running"} 1.0' in text
    torch.testing.assert_close(red, _alone(pipe, jobs[0]))
    torch.testing.assert_close(green, _alone(pipe, jobs[2]))


class _Connection:
    """A request whose client disconnects when ``gone`` is set."""

    def __init__(self):
        self.gone = asyncio.Event()

    async def receive(self):
        await self.gone.wait()
        return {"type": "http.disconnect"}


def test_a_disconnect_cancels_the_work_and_raises_499(gated_model):
    async def scenario():
        pool = _pool(gated_model, max_batch_size=1)
        pool.start()
        connection = _Connection()
        waiting = asyncio.ensure_future(
            unless_gone(pool.submit(_job(7)), disconnected(connection.receive))
        )
        await _thread_wait(lambda: gated_model.wait_for_steps(1))
        connection.gone.set()
        with pytest.raises(ClientClosedRequest) as info:
            await waiting
        for _ in range(10):
            gated_model.step_gate.release()
        await pool.close()
        return info.value

    error = asyncio.run(scenario())
    assert error.status_code == 499 and error.code == "client_closed_request"
    assert gated_model.step_rows == [[0]]


def test_a_request_over_the_cost_budget_is_refused_naming_the_limit(client_factory, fakes):
    client = client_factory(max_image_steps=100)
    response = client.post("/v1/generate", json={"prompt": "x", "steps": 50, "num_images": 3})
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert "150" in message and "max_image_steps" in message and "100" in message
    assert fakes.dit["cpu"].calls == []
    ok = client.post("/v1/generate", json={"prompt": "x", "steps": 50, "num_images": 2})
    assert ok.status_code == 200


def test_a_stylize_request_over_the_cost_budget_is_refused_naming_the_limit(client_factory, fakes):
    client = client_factory(max_stylize_pixel_passes=16_000)

    def post(styles: int):
        files = [("content", ("c.png", corpus.png(64, 48), "image/png"))]
        files += [("style", (f"s{i}.png", corpus.png(32, 32), "image/png")) for i in range(styles)]
        return client.post("/v1/stylize", files=files, data={"size": "64"})

    # quality's 1.328125 full-size passes: 64^2 x (1 content + 2 styles) x 1.328125 = 16320
    response = post(styles=2)
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert "16320" in message and "max_stylize_pixel_passes" in message and "16000" in message
    assert fakes.adain["cpu"].batch_sizes == []
    assert post(styles=1).status_code == 200  # 64^2 x 2 x 1.328125 = 10880


def _png_text(data: bytes) -> dict[str, str]:
    image = Image.open(io.BytesIO(data))
    image.load()
    return dict(image.text)


def test_generated_pngs_carry_their_parameters(client):
    body = client.post(
        "/v1/generate", json={"prompt": "a red circle", "num_images": 2, "seed": 9, "steps": 3}
    ).json()
    for b64, seed in zip(body["images"], (9, 10), strict=True):
        text = _png_text(base64.b64decode(b64))
        assert text["prompt"] == "a red circle" and text["seed"] == str(seed)
        assert (text["steps"], text["sampler"], text["guidance_scale"]) == ("3", "ddim", "3.0")
        assert text["model"] == "dit" and "checkpoint_sha256" in text
    assert body["parameters"]["prompt"] == "a red circle"
    assert body["parameters"]["steps"] == 3


def _events(client, job_id: str) -> list[tuple[str, dict]]:
    events, name = [], None
    with client.stream("GET", f"/v1/jobs/{job_id}/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        for line in stream.iter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                events.append((name, json.loads(line.split(":", 1)[1])))
    return events


def test_async_generate_job_reports_progress_and_its_result(client, fakes):
    response = client.post(
        "/v1/generate",
        json={"prompt": "a cat", "num_images": 2, "seed": 3, "steps": 5},
        headers={"Prefer": "respond-async"},
    )
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["state"] in ("queued", "running") and job["kind"] == "generate"
    events = _events(client, job["id"])
    assert events[-1][0] == "done" and events[-1][1]["state"] == "succeeded"
    steps = [data["progress"]["step"] for name, data in events if name == "progress"]
    assert steps == sorted(steps)
    final = client.get(f"/v1/jobs/{job['id']}").json()
    assert final["progress"] == {"unit": "sampler step", "step": 5, "total": 5, "fraction": 1.0}
    assert final["result"]["seeds"] == [3, 4]
    assert final["running_s"] is not None and final["queued_s"] is not None
    for b64, seed in zip(final["result"]["images"], (3, 4), strict=True):
        pixels = torch.tensor(np.asarray(Image.open(io.BytesIO(base64.b64decode(b64)))))
        expected = (_expected(seed) * 255).round().to(torch.uint8).permute(1, 2, 0)
        assert torch.equal(pixels, expected)


def test_deleting_a_running_job_stops_it_within_one_step(client, fakes):
    client.post("/v1/generate", json={"prompt": "warm up"})  # loads nothing; fakes are ready
    model = fakes.dit["cpu"]
    model.step_gate = threading.Semaphore(1)
    before = len(model.step_rows)
    job = client.post(
        "/v1/generate",
        json={"prompt": "slow", "steps": 50},
        headers={"Prefer": "respond-async"},
    ).json()
    assert model.wait_for_steps(before + 1)
    running = client.get(f"/v1/jobs/{job['id']}").json()
    assert running["state"] == "running"
    assert running["progress"]["total"] == 50
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 200
    events = _events(client, job["id"])  # ends once the task has ended
    assert events[-1][1]["state"] == "cancelled"
    for _ in range(60):
        model.step_gate.release()
    client.get("/healthz")  # a round trip on the app's loop after the releases
    model.step_gate = None
    client.post("/v1/generate", json={"prompt": "after"})  # the worker is free again
    assert len(model.step_rows) - before == 1 + 4  # one step of the job, four of "after"


def test_async_stylize_job_and_unknown_jobs(client):
    response = client.post(
        "/v1/stylize",
        files=[("content", corpus.png(24, 20)), ("style", corpus.png(16, 16))],
        data={"alpha": "0.5"},
        headers={"Prefer": "respond-async"},
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    events = _events(client, job_id)
    assert events[-1][1]["state"] == "succeeded"
    final = client.get(f"/v1/jobs/{job_id}").json()
    assert final["progress"]["unit"] == "pass"
    assert final["progress"]["step"] == get_preset("quality").passes
    data = base64.b64decode(final["result"]["images"][0])
    assert _png_text(data)["alpha"] == "0.5"
    assert final["result"]["parameters"]["alpha"] == 0.5
    assert client.get("/v1/jobs/nope").status_code == 404
    assert client.delete("/v1/jobs/nope").json()["error"]["code"] == "job_not_found"


def test_jobs_are_bounded_in_number(client_factory, fakes):
    client = client_factory(max_jobs=1)
    client.post("/v1/generate", json={"prompt": "warm up"})
    model = fakes.dit["cpu"]
    model.step_gate = threading.Semaphore(0)
    first = client.post("/v1/generate", json={"prompt": "a"}, headers={"Prefer": "respond-async"})
    assert first.status_code == 202
    second = client.post("/v1/generate", json={"prompt": "b"}, headers={"Prefer": "respond-async"})
    assert second.status_code == 429
    assert "max_jobs" in second.json()["error"]["message"]
    assert int(second.headers["Retry-After"]) >= 1
    client.delete(f"/v1/jobs/{first.json()['id']}")
    _events(client, first.json()["id"])
    for _ in range(10):
        model.step_gate.release()
    # the cancelled job is finished: its slot goes to the next job
    third = client.post("/v1/generate", json={"prompt": "c"}, headers={"Prefer": "respond-async"})
    assert third.status_code == 202
    model.step_gate = None


def test_job_routes_need_the_api_key(client_factory):
    client = client_factory(api_key="sesame")
    response = client.post(
        "/v1/generate", json={"prompt": "a"}, headers={"Prefer": "respond-async"}
    )
    assert response.status_code == 401
    assert client.get("/v1/jobs/x").status_code == 401
    assert client.delete("/v1/jobs/x").status_code == 401
    assert client.get("/v1/jobs/x/events").status_code == 401

"""Worker pools: least-loaded routing across devices, loading, model errors to API errors."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from service_fakes import Fakes, FakeStyleTransfer, make_settings

from models.adain import StyleTransfer
from models.adain.options import StyleOptions
from models.decoder import Decoder
from models.shapes.understand import understand
from models.vgg import VGGEncoder
from service.errors import Overloaded, RejectedByModel
from service.metrics import Metrics
from service.model_types import GenerateOptions
from service.workers.loading import load_models
from service.workers.pool import WorkerPool, is_out_of_memory
from service.workers.registry import ModelEntry
from service.workers.style_transfer import StylizeJob, run_stylize
from service.workers.text_to_image import GenerateJob

pytestmark = pytest.mark.timeout(30)


def _job(height: int = 8, width: int = 8, **options) -> StylizeJob:
    return StylizeJob(torch.rand(3, height, width), (torch.rand(3, 6, 6),), StyleOptions(**options))


def test_requests_go_to_the_least_loaded_device():
    models = {"dev:0": FakeStyleTransfer("dev:0"), "dev:1": FakeStyleTransfer("dev:1")}
    models["dev:0"].gate = threading.Event()
    settings = make_settings(max_batch_size=1, max_batch_wait_ms=0.0)

    async def scenario():
        pool = WorkerPool("adain", models, run_stylize, settings, Metrics())
        pool.start()
        first = asyncio.ensure_future(pool.submit(_job()))
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, models["dev:0"].entered.wait, 10)
        await pool.submit(_job())  # dev:0 is busy: this one must run on dev:1
        models["dev:0"].gate.set()
        await first
        await pool.close()

    asyncio.run(scenario())
    assert models["dev:0"].batch_sizes == [1]
    assert models["dev:1"].batch_sizes == [1]


def test_batch_key_separates_sizes_and_options():
    assert _job().batch_key() == _job().batch_key()
    assert _job(8, 8).batch_key() != _job(8, 9).batch_key()
    assert _job(alpha=0.5).batch_key() != _job(alpha=1.0).batch_key()
    assert _job(preserve_color=True).batch_key() != _job().batch_key()
    assert _job(preset="realtime").batch_key() != _job().batch_key()
    assert _job(style_scale=1.5).batch_key() != _job().batch_key()
    # weights given as a list or a tuple are the same options
    assert _job(style_weights=[1.0]).batch_key() == _job(style_weights=(1.0,)).batch_key()


def test_generate_batch_key_separates_planned_from_plain_jobs():
    def job(seed: int, plan_layout: bool) -> GenerateJob:
        options = GenerateOptions(25, 4.0, "ddpm", plan_layout)
        return GenerateJob(understand("two red squares"), None, seed, options, 32)

    assert job(1, True).batch_key() == job(2, True).batch_key()
    assert job(1, True).batch_key() != job(1, False).batch_key()


def test_a_generate_job_costs_its_pixels_as_a_stylisation_does():
    options = GenerateOptions(25, 4.0, "ddpm", True)
    small = GenerateJob(understand("a red square"), None, 1, options, 8)
    assert small.cost() == 8 * 8
    assert _job(8, 9).cost() == 8 * 9 + 6 * 6  # the content and its style


def test_run_stylize_stacks_jobs_and_splits_results():
    jobs = [_job(alpha=0.25) for _ in range(3)]
    model = FakeStyleTransfer()
    outputs = run_stylize(model, jobs)
    assert model.batch_sizes == [3]
    for job, out in zip(jobs, outputs, strict=True):
        colour = job.styles[0].mean(dim=(1, 2))[:, None, None]
        torch.testing.assert_close(out, 0.75 * job.content + 0.25 * colour.expand_as(job.content))


class _Raising:
    def __init__(self, exc):
        self.exc = exc

    def stylize(self, *args, **kwargs):
        raise self.exc


@pytest.mark.parametrize(
    ("exc", "api_error", "status"),
    [
        (ValueError("mask 0 must be (1, 1, 8, 8)"), RejectedByModel, 400),
        (torch.cuda.OutOfMemoryError("CUDA out of memory"), Overloaded, 429),
    ],
)
def test_model_errors_become_api_errors(exc, api_error, status):
    async def scenario():
        pool = WorkerPool("adain", {"cpu": _Raising(exc)}, run_stylize, make_settings(), Metrics())
        pool.start()
        try:
            with pytest.raises(api_error) as info:
                await pool.submit(_job())
        finally:
            await pool.close()
        return info.value

    error = asyncio.run(scenario())
    assert error.status_code == status


def test_other_model_errors_propagate():
    async def scenario():
        pool = WorkerPool(
            "adain", {"cpu": _Raising(RuntimeError("bug"))}, run_stylize, make_settings(), Metrics()
        )
        pool.start()
        try:
            with pytest.raises(RuntimeError, match="bug"):
                await pool.submit(_job())
        finally:
            await pool.close()

    asyncio.run(scenario())


def test_load_models_reports_failures_and_loads_the_rest():
    def broken(search_path, device):
        raise FileNotFoundError("decoder.pth")

    fakes = Fakes()
    entries = fakes.entries() | {"adain": ModelEntry("adain", broken, run_stylize)}
    settings = make_settings(load_models="adain, dit, mystery", devices="cpu")
    loaded, statuses = load_models(settings, entries)
    assert set(loaded) == {"dit"}
    assert fakes.dit["cpu"].warmed_up  # loaded models are warmed up before they serve
    assert statuses["dit"].loaded and statuses["dit"].devices == ["cpu"]
    assert not statuses["adain"].loaded and "decoder.pth" in statuses["adain"].error
    assert "unknown model 'mystery'" in statuses["mystery"].error


def test_out_of_memory_is_told_from_other_errors():
    assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert not is_out_of_memory(ValueError("bad mask"))


def test_a_pool_needs_a_device():
    with pytest.raises(ValueError):
        WorkerPool("adain", {}, run_stylize, make_settings(), Metrics())


def test_the_fake_style_transfer_describes_itself_with_the_real_fields():
    """Routes and provenance read these fields (``levels``, ``mode``, ``dtype``, the
    weight files): the fake must give each of them, with the same types."""
    levels = ("relu3_1", "relu2_1", "relu1_1")
    real = StyleTransfer(VGGEncoder("relu3_1"), {level: Decoder(level) for level in levels})
    expected, fake = real.describe(), FakeStyleTransfer().describe()
    assert set(fake) == set(expected)
    assert {key: type(value) for key, value in fake.items()} == {
        key: type(value) for key, value in expected.items()
    }

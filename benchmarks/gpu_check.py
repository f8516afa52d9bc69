"""One-shot check of the product on a GPU: numerics, speed, syncs, OOM, training, the app.

A machine with an NVIDIA GPU runs it once (``python benchmarks/gpu_check.py --out
benchmarks/results/<date>-<card>.json``, a few minutes on an H200); ``--device cpu
--quick`` runs the same structure here in about a minute on tiny shapes (the test
``tests/test_gpu_check.py`` does, so the script cannot rot without a GPU). Every section
is written to the JSON as soon as it is done (a crash leaves the ones before it), and an
error in one section is recorded there and does not stop the others. A short table
closes the run.

Sections (keys of the JSON):

- ``device``: name, compute capability, native bf16, versions, memory, and the measured
  device-to-device copy bandwidth (the ceiling of a memory-bound operation).
- ``numerics``: the norms on the device (fp32, bf16, channels_last, a 1e4 offset)
  against float64 references computed on the CPU from the same rounded inputs.
- ``adain``: images/s of the AdaIN passes (the paper's single relu3_1 pass, the
  ``quality`` and ``realtime`` presets) at 512 and 1024 px, batch 1, 8 and 32, from host
  tensors to host tensors as the service runs them, with peak memory; print-size
  stylisations of 4096 and 8192 px photos per preset (images/s, us per pixel, peak
  memory); the syncs of one
  call per pass; the difference from the CPU's result for the same inputs. VGG weights
  from ``ATELIER_WEIGHTS_DIR`` when present, else random weights of the same shapes.
- ``profile``: where the paper pass spends a batch at 512 px, batch 32: host to host,
  on the device alone, the result's copy into pageable and page-locked memory, and
  ``torch.profiler``'s ten costliest operations per call.
- ``dit``: images/s of ``TextToImage.generate`` with the repository's checkpoint (a
  tiny random one with ``--quick``) at batch 1, 8 and 32 (1 and 8 on the CPU; auto
  precision),
  host syncs per sampler step (``torch.cuda.set_sync_debug_mode``; host reads counted
  by ``models.devices.HostReads`` on any device), bf16 against fp32
  (``models.dit.pipeline.BF16_TOLERANCE``), and the same seed alone and in a batch.
- ``oom``: a memory-fraction cap under which a batch of eight 1024 px stylize jobs does
  not fit, submitted through ``service.workers.pool.WorkerPool.submit``: every request must
  get its answer (CUDA only).
- ``training``: DiT training steps in auto precision, saved and resumed, against the
  same steps without a break.
- ``app``: one stylize and one generate through the FastAPI app on the device.
- ``targets``: the issue's targets, measured and met or not.

Usage:
    python benchmarks/gpu_check.py --out benchmarks/results/2025-01-01-h200.json
    python benchmarks/gpu_check.py --device cpu --quick --out /tmp/check.json
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

import norms
from models.devices import HostReads, bf16_supported, to_host

REPO = Path(__file__).resolve().parent.parent
SECTIONS = (
    "device",
    "numerics",
    "adain",
    "profile",
    "dit",
    "oom",
    "training",
    "app",
)
#: The issue's targets on an H200.
TARGETS = {
    "adain_images_per_s_512_b32": 500.0,
    "dit_syncs_per_step": 0,
}


@dataclass
class Check:
    """What every section needs: the device, the size of the run, where to log."""

    device: torch.device
    quick: bool

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def time_ms(self, fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
        """Median milliseconds of ``fn`` (CUDA events on a GPU, the wall clock elsewhere)."""
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeats):
            if self.cuda:
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                begin = time.perf_counter()
                fn()
                times.append((time.perf_counter() - begin) * 1e3)
        return statistics.median(times)

    def peak_memory_reset(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_memory_mib(self) -> float | None:
        return torch.cuda.max_memory_allocated(self.device) / 2**20 if self.cuda else None


# ----------------------------------------------------------------------------- device
def copy_bandwidth_gbs(check: Check) -> float:
    """Device-to-device copy of a large buffer: (read + write bytes) / time."""
    elements = (2**26 if check.quick else 2**28) // 4  # 64 MiB / 256 MiB of float32
    source = torch.empty(elements, device=check.device)
    target = torch.empty_like(source)
    ms = check.time_ms(lambda: target.copy_(source), repeats=5 if check.quick else 20)
    return 2 * source.numel() * 4 / (ms / 1e3) / 1e9


def section_device(check: Check) -> dict:
    info = {
        "type": check.device.type,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "bf16_native": bf16_supported(check.device),
        "threads": torch.get_num_threads(),
    }
    if check.cuda:
        props = torch.cuda.get_device_properties(check.device)
        info |= {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
        }
    else:
        info |= {"name": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    info["copy_bandwidth_gbs"] = round(copy_bandwidth_gbs(check), 1)
    return info


# --------------------------------------------------------------------------- numerics
def _offset(dtype: torch.dtype) -> float:
    """The large common offset of the numerics inputs: 1e4 in float32; 1e2 in bfloat16,
    whose 8 bits would round 1e4 + N(0, 1) to a constant (every value 9984)."""
    return 1e2 if dtype == torch.bfloat16 else 1e4


def _tolerance(dtype: torch.dtype, offset: bool) -> float:
    """Allowed max error relative to the output's scale: bf16 output rounding is 2^-8
    relative (a few ulps for the arithmetic), float32 ~1e-4 (1e-2 after a 1e4 offset,
    whose float32 rounding is 1e-3 of the input)."""
    if dtype == torch.bfloat16:
        return 3e-2
    return 1e-2 if offset else 1e-4


def _numeric_cases(check: Check) -> list[tuple[str, Callable, Callable]]:
    """``(name, make_inputs(dtype, channels_last, offset), call(*inputs))``."""
    image = (2, 8, 6, 6) if check.quick else (8, 64, 64, 64)
    tokens = (2, 16, 32) if check.quick else (8, 256, 1152)
    c, d = image[1], tokens[2]

    def images(count, batch1=False):
        def make(dtype, channels_last, offset, gen):
            out = []
            for i in range(count):
                shape = (1, *image[1:]) if batch1 and i > 0 else image
                x = torch.randn(shape, generator=gen, dtype=torch.float64)
                x = x + (_offset(dtype) if offset else 0.0)
                out.append(x)
            return out

        return make

    def token_inputs(dtype, channels_last, offset, gen):
        x = torch.randn(tokens, generator=gen, dtype=torch.float64)
        x = x + (_offset(dtype) if offset else 0.0)
        shift = torch.randn(tokens[0], d, generator=gen, dtype=torch.float64)
        scale = 0.3 * torch.randn(tokens[0], d, generator=gen, dtype=torch.float64)
        return [x, shift, scale]

    # exact in bfloat16, so the reference sees the same affine as the device
    weight = 0.5 + 0.25 * (torch.arange(c, dtype=torch.float64) % 7)
    bias = -1.0 + 0.25 * (torch.arange(c, dtype=torch.float64) % 9)
    return [
        ("layer_norm", token_inputs, lambda x, s, t: norms.F.layer_norm(x, x.shape[-1])),
        ("rms_norm", token_inputs, lambda x, s, t: norms.F.rms_norm(x, x.shape[-1])),
        ("ada_layer_norm", token_inputs, lambda x, s, t: norms.F.ada_layer_norm(x, s, t)),
        (
            "group_norm",
            images(1),
            lambda x: norms.F.group_norm(x, 4, weight.to(x), bias.to(x)),
        ),
        ("instance_norm", images(1), lambda x: norms.F.instance_norm(x)),
        ("adain", images(2, batch1=True), lambda x, s: norms.F.adain(x, s)),
        (
            "batch_norm",
            images(1),
            lambda x: norms.F.batch_norm(x, weight=weight.to(x), bias=bias.to(x)),
        ),
    ]


def _compare(got: torch.Tensor, reference: torch.Tensor) -> float:
    """Max error relative to the reference's scale (its RMS, at least 1)."""
    scale = max(1.0, float(reference.pow(2).mean().sqrt()))
    return float((got.detach().cpu().double() - reference).abs().max()) / scale


def section_numerics(check: Check) -> dict:
    rows = []
    gen = torch.Generator().manual_seed(0)
    for name, make, call in _numeric_cases(check):
        for dtype in (torch.float32, torch.bfloat16):
            for channels_last in (False, True):
                if channels_last and name in ("layer_norm", "rms_norm", "ada_layer_norm"):
                    continue
                for offset in (False, True):
                    inputs = [x.to(dtype) for x in make(dtype, channels_last, offset, gen)]
                    on_device = [x.to(check.device) for x in inputs]
                    if channels_last:
                        on_device[0] = on_device[0].contiguous(memory_format=torch.channels_last)
                    got = call(*on_device)
                    reference = call(*[x.double() for x in inputs])  # the rounded inputs
                    error = _compare(got, reference)
                    rows.append(
                        {
                            "member": name,
                            "dtype": str(dtype).removeprefix("torch."),
                            "channels_last": channels_last,
                            "offset": _offset(dtype) if offset else 0.0,
                            "max_error": error,
                            "tolerance": _tolerance(dtype, offset),
                            "ok": error <= _tolerance(dtype, offset) and got.dtype == dtype,
                        }
                    )
    return {
        "members": rows,
        "all_ok": all(r["ok"] for r in rows),
    }


def _style_transfer(device: torch.device, *, fast: bool):
    """The service's AdaIN model (shared weights, or random ones of the same shapes)."""
    from models.adain import StyleTransfer
    from models.decoder import Decoder
    from models.vgg import VGGEncoder

    folder = os.environ.get("ATELIER_WEIGHTS_DIR")
    if folder and (Path(folder) / "vgg19-normalised").is_dir():
        model = StyleTransfer.from_pretrained([Path(folder)], device=device, fast=fast)
        return model, "pretrained"
    torch.manual_seed(0)
    encoder = VGGEncoder("relu3_1")
    decoders = {level: Decoder(level) for level in ("relu1_1", "relu2_1", "relu3_1")}
    return StyleTransfer(encoder, decoders, fast=fast).to(device), "random"


ADAIN_PASSES = {
    "paper (relu3_1 once)": {"levels": ("relu3_1",), "preset": "quality"},
    "quality": {"preset": "quality"},
    "realtime": {"preset": "realtime"},
}


def section_adain(check: Check) -> dict:
    from models.dit.pipeline import agreement

    model, weights = _style_transfer(check.device, fast=True)
    sizes = [64] if check.quick else [512, 1024]
    batches = [1, 2] if check.quick else [1, 8, 32]
    repeats = 1 if check.quick else 3
    gen = torch.Generator().manual_seed(3)
    style = torch.rand(1, 3, 256, 256, generator=gen)
    rows = []
    for size in sizes:
        photos = torch.rand(max(batches), 3, size, size, generator=gen)
        for name, options in ADAIN_PASSES.items():
            for batch in batches:
                content = photos[:batch]  # on the host, as the service hands it over
                check.peak_memory_reset()
                try:
                    ms = check.time_ms(
                        lambda c=content, o=options: to_host(model.stylize(c, [style], **o)),
                        repeats,
                        warmup=0 if check.quick else 1,
                    )
                except torch.cuda.OutOfMemoryError as exc:
                    rows.append({"pass": name, "size": size, "batch": batch, "error": str(exc)})
                    torch.cuda.empty_cache()
                    continue
                rows.append(
                    {
                        "pass": name,
                        "size": size,
                        "batch": batch,
                        "ms_per_batch": round(ms, 2),
                        "images_per_s": round(batch / (ms / 1e3), 2),
                        "peak_memory_mib": check.peak_memory_mib(),
                    }
                )
    rows += _print_size_rows(check, model, style)
    result = {"weights": weights, "dtype": model.describe()["dtype"], "runs": rows}
    # syncs of one call per pass (batch 2; a GPU's, and the host reads on any device)
    content = photos[:2]
    result["syncs_per_call"] = {
        name: count_syncs(check, lambda o=options: model.stylize(content, [style], **o))
        for name, options in ADAIN_PASSES.items()
    }
    # the same inputs on the CPU in float32, one image per pass; beside it, the CPU's own
    # fast path (bf16 where native) against float32: how far a device's result may be
    # from float32 and still be the product's
    cpu_float32, _ = _style_transfer(torch.device("cpu"), fast=False)
    cpu_fast, _ = _style_transfer(torch.device("cpu"), fast=True)
    side = 64 if check.quick else 512
    content = torch.rand(1, 3, side, side, generator=gen)
    reference = {
        name: cpu_float32.stylize(content, [style], **options)
        for name, options in ADAIN_PASSES.items()
    }
    result["cpu_fast_against_float32"] = {
        name: agreement(reference[name], cpu_fast.stylize(content, [style], **options))
        for name, options in ADAIN_PASSES.items()
    }
    if check.cuda:
        result["against_cpu"] = {
            name: agreement(
                reference[name],
                to_host(model.stylize(content.to(check.device), [style], **options)),
            )
            for name, options in ADAIN_PASSES.items()
        }
    else:
        result["against_cpu"] = "the device is the CPU"
    return result


def section_profile(check: Check) -> dict:
    """Where the paper pass spends a batch (512 px, batch 32; 64 px, batch 2 with
    ``--quick``): the call from host to host and on the device alone, the result's copy
    back into pageable and into page-locked memory, and the ten costliest operations by
    self time (the device's on a GPU, the CPU's elsewhere) per call, from
    ``torch.profiler`` over three calls."""
    from torch.profiler import ProfilerActivity, profile

    model, _ = _style_transfer(check.device, fast=True)
    side, batch = (64, 2) if check.quick else (512, 32)
    gen = torch.Generator().manual_seed(8)
    content = torch.rand(batch, 3, side, side, generator=gen)
    style = torch.rand(1, 3, 256, 256, generator=gen)
    options = ADAIN_PASSES["paper (relu3_1 once)"]
    on_device = content.to(check.device)
    output = model.stylize(on_device, [style], **options)
    repeats = 1 if check.quick else 5
    calls: dict[str, Callable[[], object]] = {
        "host_to_host_ms": lambda: to_host(model.stylize(content, [style], **options)),
        "on_device_ms": lambda: model.stylize(on_device, [style], **options),
        "copy_to_pageable_ms": lambda: output.cpu(),
        "copy_to_page_locked_ms": lambda: to_host(output),
    }
    result: dict = {"pass": "paper (relu3_1 once)", "size": side, "batch": batch}
    result |= {name: round(check.time_ms(fn, repeats), 2) for name, fn in calls.items()}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if check.cuda else [])
    with profile(activities=activities) as profiler:
        for _ in range(3):
            calls["host_to_host_ms"]()
        check.sync()
    field = "self_device_time_total" if check.cuda else "self_cpu_time_total"
    events = sorted(profiler.key_averages(), key=lambda e: getattr(e, field), reverse=True)
    result["top_ops"] = [
        {"op": e.key, "ms_per_call": round(getattr(e, field) / 1e3 / 3, 2), "count": e.count}
        for e in events[:10]
    ]
    return result


def _print_size_rows(check: Check, model, style: torch.Tensor) -> list[dict]:
    """Print-size stylisations (``models.adain.large``, what the service's jobs run): one
    4096 x 3072 and one 8192 x 6144 photo per preset, 8-bit on the host, with the device's
    peak memory. ``--quick`` paints 96 x 72 on a 32 px base instead."""
    from models.adain.presets import BASE_SIDE

    sizes = [(72, 96)] if check.quick else [(3072, 4096), (6144, 8192)]
    if check.quick:
        model.base_side = 32
    gen = torch.Generator().manual_seed(5)
    rows = []
    try:
        for height, width in sizes:
            photo = torch.randint(0, 256, (3, height, width), generator=gen, dtype=torch.uint8)
            for preset in ("quality", "realtime"):
                check.peak_memory_reset()

                def paint(p=preset, photo=photo):
                    session = model.print_stylization(photo, [style], preset=p)
                    return session.run(model)

                try:
                    ms = check.time_ms(paint, 1, warmup=0)
                except torch.cuda.OutOfMemoryError as exc:
                    rows.append({"pass": f"print {preset}", "size": width, "error": str(exc)})
                    torch.cuda.empty_cache()
                    continue
                rows.append(
                    {
                        "pass": f"print {preset}",
                        "size": width,
                        "batch": 1,
                        "ms_per_batch": round(ms, 2),
                        "images_per_s": round(1e3 / ms, 4),
                        "us_per_pixel": round(ms * 1e3 / (height * width), 4),
                        "peak_memory_mib": check.peak_memory_mib(),
                    }
                )
    finally:
        model.base_side = BASE_SIDE
    return rows


# -------------------------------------------------------------------------------- dit
def _text_to_image(check: Check):
    """The repository's checkpoint with MiniLM; with ``--quick``, the tiny preset with
    random weights and the weight-free text encoder (the structure, in seconds)."""
    from models.dit.pipeline import TextToImage

    if not check.quick:
        return TextToImage.from_pretrained([REPO / "weights"], device=check.device)
    from models.dit.config import get_preset
    from models.dit.model import DiT
    from models.text_encoder import HashedWordEncoder

    torch.manual_seed(0)
    model = DiT(get_preset("tiny"))
    with torch.no_grad():  # away from the zero-initialised gates, so the blocks do work
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return TextToImage(model, HashedWordEncoder(model.config.text_dim), device=check.device)


def count_syncs(check: Check, fn: Callable[[], object]) -> dict:
    """Host syncs while ``fn`` runs: CUDA's sync debug mode (warnings) on a GPU, and the
    host reads :class:`HostReads` sees on any device."""
    check.sync()
    with warnings.catch_warnings(record=True) as caught, HostReads() as reads:
        warnings.simplefilter("always")
        if check.cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            if check.cuda:
                torch.cuda.set_sync_debug_mode("default")
    syncs = sum("synchroniz" in str(w.message) for w in caught) if check.cuda else None
    return {"cuda_syncs": syncs, "host_reads": reads.count, "reads": sorted(set(reads.names))}


def section_dit(check: Check) -> dict:
    from models.dit.pipeline import agreement, within_bf16_tolerance

    pipe = _text_to_image(check)
    prompts = [
        "a red circle to the left of a blue square",
        "a green triangle",
        "two yellow squares",
        "a blue circle above a red triangle",
    ]
    batches = [1, 2] if check.quick else [1, 8, 32] if check.cuda else [1, 8]
    steps = 3 if check.quick else 25
    result = {"precision": pipe.describe()["precision"], "steps": steps}
    begin = time.perf_counter()
    pipe.warm_up()
    result["warm_up_s"] = round(time.perf_counter() - begin, 2)
    runs = []
    for batch in batches:
        batch_prompts = [prompts[i % len(prompts)] for i in range(batch)]
        check.peak_memory_reset()
        ms = check.time_ms(
            lambda p=batch_prompts, b=batch: pipe.generate(p, seeds=list(range(b)), steps=steps),
            repeats=3 if check.cuda else 1,
        )
        runs.append(
            {
                "batch": batch,
                "ms_per_batch": round(ms, 1),
                "images_per_s": round(batch / (ms / 1e3), 2),
                "peak_memory_mib": check.peak_memory_mib(),
            }
        )
    result["runs"] = runs
    # syncs per step: the difference between a short and a long run, per extra step
    batch = batches[-1] if check.quick else 8
    few, many = (2, 4) if check.quick else (4, 12)
    pipe.generate(prompts[:1] * batch, seeds=list(range(batch)), steps=few)  # captions cached
    counts = {
        n: count_syncs(
            check,
            lambda n=n: pipe.generate(prompts[:1] * batch, seeds=list(range(batch)), steps=n),
        )
        for n in (few, many)
    }
    per_step = {}
    for key in ("cuda_syncs", "host_reads"):
        if counts[few][key] is not None:
            per_step[key] = (counts[many][key] - counts[few][key]) / (many - few)
    result["syncs"] = {"per_step": per_step, "per_call": counts}
    # bf16 against fp32, and a seed alone against the same seed in a batch
    compare = prompts[:2] if check.quick else prompts * 2
    seeds = list(range(100, 100 + len(compare)))
    fp32 = pipe if pipe.autocast is None else _with_precision(pipe, check, "fp32")
    bf16 = pipe if pipe.autocast == torch.bfloat16 else _with_precision(pipe, check, "bf16")
    reference = fp32.generate(compare, seeds=seeds, steps=steps)
    if bf16 is not None:
        measured = agreement(reference, bf16.generate(compare, seeds=seeds, steps=steps))
        result["bf16_vs_fp32"] = measured | {"within_tolerance": within_bf16_tolerance(measured)}
    alone = pipe.generate(compare[1:2], seeds=seeds[1:2], steps=steps)
    in_batch = pipe.generate(compare, seeds=seeds, steps=steps)[1:2]
    result["seed_alone_vs_in_batch"] = agreement(alone, in_batch)
    return result


def _with_precision(pipe, check: Check, precision: str):
    """A pipeline sharing ``pipe``'s weights in another precision (bf16 is emulated on a
    CPU without native kernels); ``None`` where the device refuses it."""
    from models.dit.pipeline import TextToImage

    try:
        return TextToImage(pipe.model, pipe.encoder, device=check.device, precision=precision)
    except ValueError:  # bf16 on a GPU without it
        return None


# --------------------------------------------------------------------------- dispatch
# -------------------------------------------------------------------------------- oom
def section_oom(check: Check) -> dict:
    """A batch that cannot fit under a memory-fraction cap, through the worker pool."""
    if not check.cuda:
        return {"skipped": "needs a CUDA device (a memory-fraction cap is a CUDA feature)"}
    from service.config import Settings
    from service.metrics import Metrics
    from service.workers.pool import WorkerPool
    from service.workers.style_transfer import run_stylize

    model, _ = _style_transfer(check.device, fast=True)
    gen = torch.Generator().manual_seed(4)
    content = torch.rand(3, 1024, 1024, generator=gen)
    style = torch.rand(3, 256, 256, generator=gen)
    from service.workers.style_transfer import StylizeJob

    job = StylizeJob(content=content, styles=(style,))
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated(check.device)
    check.peak_memory_reset()
    run_stylize(model, [job])  # one image's peak
    peak_one = torch.cuda.max_memory_allocated(check.device) - base
    total = torch.cuda.get_device_properties(check.device).total_memory
    fraction = min(1.0, (base + 2.5 * peak_one) / total)  # fits 2 images, not 4 or 8
    settings = Settings(
        devices=str(check.device),
        max_batch_size=8,
        max_batch_wait_ms=2000.0,
        queue_size=16,
        request_timeout_s=300.0,
        _env_file=None,
    )
    pool = WorkerPool("adain", {str(check.device): model}, run_stylize, settings, Metrics())

    async def submit_all():
        pool.start()
        try:
            jobs = [StylizeJob(content=content, styles=(style,)) for _ in range(8)]
            return await asyncio.gather(*(pool.submit(j) for j in jobs), return_exceptions=True)
        finally:
            await pool.close()

    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(fraction, check.device)
    begin = time.perf_counter()
    try:
        answers = asyncio.run(submit_all())
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, check.device)
        torch.cuda.empty_cache()
    kinds = [type(a).__name__ if isinstance(a, BaseException) else "image" for a in answers]
    expected = run_stylize(model, [job])[0]
    images = [a for a in answers if isinstance(a, torch.Tensor)]
    return {
        "peak_one_image_mib": round(peak_one / 2**20, 1),
        "memory_fraction": round(fraction, 4),
        "answers": kinds,
        "every_request_answered": len(answers) == 8,
        "all_images": kinds == ["image"] * 8,
        "max_difference_from_alone": max(
            (float((img - expected).abs().max()) for img in images), default=None
        ),
        "seconds": round(time.perf_counter() - begin, 2),
    }


# --------------------------------------------------------------------------- training
def section_training(check: Check) -> dict:
    import tempfile

    from models.dit.train import TrainConfig, Trainer
    from models.text_encoder import HashedWordEncoder

    config = TrainConfig(
        preset="tiny" if check.quick else "shapes32",
        batch_size=4 if check.quick else 64,
        warmup_steps=2,
        precision="auto",
    )
    steps = 2 if check.quick else 10

    def trainer():
        return Trainer(config, encoder=HashedWordEncoder(384), device=check.device)

    straight = trainer()
    check.sync()
    begin = time.perf_counter()
    losses = [straight.train_step() for _ in range(2 * steps)]
    check.sync()
    seconds = time.perf_counter() - begin
    first = trainer()
    for _ in range(steps):
        first.train_step()
    with tempfile.TemporaryDirectory() as folder:
        path = first.save(Path(folder) / "state.pt")
        resumed = trainer()
        resumed.resume(path)
    resumed_losses = [resumed.train_step() for _ in range(steps)]
    difference = max(
        float((a - b).detach().abs().max())
        for a, b in zip(straight.model.parameters(), resumed.model.parameters(), strict=True)
    )
    return {
        "autocast": str(straight.autocast),
        "steps_per_s": round(2 * steps / seconds, 2),
        "samples_per_s": round(2 * steps * config.batch_size / seconds, 1),
        "last_loss": losses[-1],
        "resumed_last_loss": resumed_losses[-1],
        "max_weight_difference_resumed_vs_straight": difference,
        "generator_state_equal": bool(
            torch.equal(straight.generator.get_state(), resumed.generator.get_state())
        ),
    }


# -------------------------------------------------------------------------------- app
def _png(size: tuple[int, int], seed: int) -> bytes:
    from models.images import encode_image

    gen = torch.Generator().manual_seed(seed)
    return encode_image(torch.rand(3, size[1], size[0], generator=gen), "png")[0]


def section_app(check: Check) -> dict:
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.config import Settings

    folder = os.environ.get("ATELIER_WEIGHTS_DIR")
    if not folder or not (Path(folder) / "vgg19-normalised").is_dir():
        return {"skipped": "the app loads the pretrained VGG weights: set ATELIER_WEIGHTS_DIR"}
    settings = Settings(
        devices=str(check.device),
        weights_dir=Path(folder),
        load_models="adain,dit",
        max_batch_wait_ms=0.0,
        _env_file=None,
    )
    result = {}
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        size = "64" if check.quick else "512"
        begin = time.perf_counter()
        response = client.post(
            "/v1/stylize",
            files=[("content", _png((96, 80), 1)), ("style", _png((64, 64), 2))],
            data={"size": size},
        )
        result["stylize"] = {
            "status": response.status_code,
            "ms": round((time.perf_counter() - begin) * 1e3, 1),
            "content_type": response.headers.get("content-type"),
        }
        begin = time.perf_counter()
        response = client.post(
            "/v1/generate",
            json={"prompt": "a red circle", "num_images": 1, "steps": 4, "seed": 1},
        )
        result["generate"] = {
            "status": response.status_code,
            "ms": round((time.perf_counter() - begin) * 1e3, 1),
        }
        models = client.get("/v1/models").json().get("models", [])
        result["devices"] = {m.get("name"): m.get("devices") for m in models}
    result["ok"] = result["stylize"]["status"] == 200 and result["generate"]["status"] == 200
    return result


# ---------------------------------------------------------------------------- targets
def section_targets(results: dict) -> dict:
    targets = {}
    adain_rows = results.get("adain", {}).get("runs", [])
    best = [
        r["images_per_s"]
        for r in adain_rows
        if r.get("size") == 512 and r.get("batch") == 32 and "images_per_s" in r
    ]
    if best:
        targets["adain_512_b32"] = {
            "measured_images_per_s": {
                r["pass"]: r["images_per_s"]
                for r in adain_rows
                if r.get("size") == 512 and r.get("batch") == 32 and "images_per_s" in r
            },
            "target": TARGETS["adain_images_per_s_512_b32"],
            "met_by_the_paper_pass": any(
                r["images_per_s"] >= TARGETS["adain_images_per_s_512_b32"]
                for r in adain_rows
                if r.get("size") == 512 and r.get("batch") == 32 and r["pass"].startswith("paper")
            ),
        }
    per_step = results.get("dit", {}).get("syncs", {}).get("per_step", {})
    if "cuda_syncs" in per_step:
        targets["dit_syncs_per_step"] = {
            "measured": per_step["cuda_syncs"],
            "target": TARGETS["dit_syncs_per_step"],
            "met": per_step["cuda_syncs"] <= TARGETS["dit_syncs_per_step"],
        }
    return targets


# ------------------------------------------------------------------------------- main
def run(check: Check, sections: list[str], out: Path | None) -> dict:
    started = time.perf_counter()
    results: dict = {
        "meta": {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "device": str(check.device),
            "quick": check.quick,
            "sections": sections,
        }
    }
    for name in sections:
        begin = time.perf_counter()
        print(f"[gpu_check] {name} ...", flush=True)
        try:
            value = globals()[f"section_{name}"](check)
        except Exception as exc:  # recorded, and the other sections still run
            value = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            if check.cuda:
                torch.cuda.empty_cache()
        value["section_seconds"] = round(time.perf_counter() - begin, 1)
        results[name] = value
        _write(results, out)
    results["targets"] = section_targets(results)
    results["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    _write(results, out)
    return results


def _write(results: dict, out: Path | None) -> None:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, default=str) + "\n")


def _row(label: str, figure: str) -> str:
    """A row of the summary table."""
    return f"| {label} | {figure} |"


def summary(results: dict) -> str:
    """The short table printed at the end."""
    lines = ["| section | figure |", "|---|---|"]
    device = results.get("device", {})
    if "name" in device:
        bf16 = device.get("bf16_native")
        copy = f"copy {device.get('copy_bandwidth_gbs')} GB/s"
        capability = f"capability {device.get('capability', '-')}, bf16 native {bf16}"
        lines.append(_row("device", f"{device['name']} ({capability}), {copy}"))
    numerics = results.get("numerics", {})
    if "members" in numerics:
        bad = [f"{r['member']}/{r['dtype']}" for r in numerics["members"] if not r["ok"]]
        lines.append(_row("numerics", f"members ok: {numerics['all_ok']} {bad or ''}"))
    for row in results.get("adain", {}).get("runs", []):
        if "images_per_s" in row:
            memory = row["peak_memory_mib"]
            figure = f"{row['images_per_s']} images/s" + (
                f", peak {memory:.0f} MiB" if memory else ""
            )
            lines.append(_row(f"adain {row['pass']} {row['size']} px b{row['batch']}", figure))
    dit = results.get("dit", {})
    for row in dit.get("runs", []):
        lines.append(
            _row(f"dit b{row['batch']} ({dit['steps']} steps)", f"{row['images_per_s']} images/s")
        )
    if "syncs" in dit:
        lines.append(_row("dit syncs per step", str(dit["syncs"]["per_step"])))
    if "bf16_vs_fp32" in dit:
        lines.append(_row("dit bf16 vs fp32", str(dit["bf16_vs_fp32"])))
    profiled = results.get("profile", {})
    if "top_ops" in profiled:
        copy_back = (
            f"{profiled['copy_to_pageable_ms']} ms pageable / "
            f"{profiled['copy_to_page_locked_ms']} ms page-locked"
        )
        times = (
            f"host to host {profiled['host_to_host_ms']} ms, "
            f"on the device {profiled['on_device_ms']} ms, copy back {copy_back}"
        )
        lines.append(_row(f"profile paper {profiled['size']} px b{profiled['batch']}", times))
    for name in ("oom", "training", "app"):
        section = results.get(name, {})
        brief = {k: v for k, v in section.items() if k not in ("traceback", "answers")}
        lines.append(_row(name, json.dumps(brief, default=str)[:200]))
    for name, target in results.get("targets", {}).items():
        lines.append(_row(f"target {name}", json.dumps(target)))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = "cuda:0" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", default=default, help=f"default: {default}")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, a structure check")
    parser.add_argument("--out", type=Path, help="write the JSON here")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    args = parser.parse_args()
    check = Check(torch.device(args.device), args.quick)
    results = run(check, args.sections, args.out)
    print(summary(results))
    errors = [name for name in args.sections if "error" in results.get(name, {})]
    if errors:
        raise SystemExit(f"[gpu_check] sections with errors: {errors}")


if __name__ == "__main__":
    main()

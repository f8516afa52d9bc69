"""Speed of the ``norms`` members on the CPU, each measured side by side with its baseline.

Native-backed members (torch has them) are timed against torch's own function:
ratio = ours / torch, target <= 1.1. Composite members are timed against a plain eager
composition of the same formula: speedup = eager / ours, target >= 1.3. Every pair is
timed in one run, interleaved (ours, baseline, baseline, ours, ...) and summarised by the
median, so machine load affects both sides alike. GB/s counts one read of the inputs and
one write of the output per call.

    python benchmarks/norms_bench.py            # full shapes: (8, 64, 128, 128), (8, 1024, 768)
    python benchmarks/norms_bench.py --quick    # tiny shapes, a smoke test
    python benchmarks/norms_bench.py --json     # machine-readable
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as TF  # noqa: N812

import norms
from norms.functional.switchable import switchable_norm_reference

IMAGE_SHAPE = (8, 64, 128, 128)
TOKEN_SHAPE = (8, 1024, 768)
QUICK_IMAGE_SHAPE = (2, 8, 16, 16)
QUICK_TOKEN_SHAPE = (2, 16, 32)
NATIVE_TARGET = 1.1  # ours / torch at most
COMPOSITE_TARGET = 1.3  # eager / ours at least


@dataclass
class Case:
    """One member: our call, its baseline, and the bytes a call must move."""

    member: str
    kind: str  # "native" (baseline: torch) or "composite" (baseline: eager formula)
    shape: tuple[int, ...]
    ours: Callable[[], torch.Tensor]
    baseline: Callable[[], torch.Tensor]
    nbytes: int


@dataclass
class Result:
    member: str
    kind: str
    shape: tuple[int, ...]
    ours_ms: float
    baseline_ms: float
    ours_gbs: float
    baseline_gbs: float
    figure: float  # native: ours / torch; composite: eager / ours
    target: str
    met: bool


# ------------------------------------------------------------- eager compositions


def adain_eager(content, style, eps=1e-5):
    mean_c = content.mean((2, 3), keepdim=True)
    std_c = torch.sqrt(content.var((2, 3), keepdim=True, correction=0) + eps)
    mean_s = style.mean((2, 3), keepdim=True)
    std_s = torch.sqrt(style.var((2, 3), keepdim=True, correction=0) + eps)
    return (content - mean_c) / std_c * std_s + mean_s


def ada_layer_norm_eager(x, shift, scale, eps=1e-6):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, correction=0)
    return (x - mean) / torch.sqrt(var + eps) * (1 + scale[:, None]) + shift[:, None]


def global_response_norm_eager(x, weight, bias, eps=1e-6):
    gx = torch.norm(x, p=2, dim=(2, 3), keepdim=True)
    nx = gx / (gx.mean(dim=1, keepdim=True) + eps)
    return weight.view(1, -1, 1, 1) * (x * nx) + bias.view(1, -1, 1, 1) + x


# ---------------------------------------------------------------------- cases


def build_cases(image_shape, token_shape) -> list[Case]:
    gen = torch.Generator().manual_seed(0)
    image = torch.randn(image_shape, generator=gen)
    style = torch.randn(image_shape, generator=gen) * 2 + 1
    tokens = torch.randn(token_shape, generator=gen)
    channels, width, batch = image_shape[1], token_shape[-1], token_shape[0]
    groups = min(32, channels)
    c_weight, c_bias = (
        torch.rand(channels, generator=gen) + 0.5,
        torch.randn(channels, generator=gen),
    )
    d_weight, d_bias = torch.rand(width, generator=gen) + 0.5, torch.randn(width, generator=gen)
    shift, scale = (
        torch.randn(batch, width, generator=gen),
        torch.randn(batch, width, generator=gen),
    )
    running = [
        torch.zeros(channels),
        torch.ones(channels),
        torch.zeros(channels),
        torch.ones(channels),
    ]
    mix_mean, mix_var = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.3, 0.5])
    sw_running = [torch.zeros(channels), torch.ones(channels)]
    alpha, size = 1e-4, 5
    io_image, io_tokens = 2 * image.nbytes, 2 * tokens.nbytes
    F = norms.F
    return [
        Case(
            "batch", "native", image_shape,
            lambda: F.batch_norm(image, running[0], running[1], c_weight, c_bias, True),
            lambda: TF.batch_norm(image, running[2], running[3], c_weight, c_bias, True),
            io_image,
        ),
        Case(
            "layer", "native", token_shape,
            lambda: F.layer_norm(tokens, (width,), d_weight, d_bias),
            lambda: TF.layer_norm(tokens, (width,), d_weight, d_bias),
            io_tokens,
        ),
        Case(
            "group", "native", image_shape,
            lambda: F.group_norm(image, groups, c_weight, c_bias),
            lambda: TF.group_norm(image, groups, c_weight, c_bias),
            io_image,
        ),
        Case(
            "instance", "native", image_shape,
            lambda: F.instance_norm(image, c_weight, c_bias),
            lambda: TF.instance_norm(image, weight=c_weight, bias=c_bias),
            io_image,
        ),
        Case(
            "rms", "native", token_shape,
            lambda: F.rms_norm(tokens, (width,), d_weight),
            lambda: TF.rms_norm(tokens, (width,), d_weight, 1e-6),
            io_tokens,
        ),
        Case(
            "local_response", "native", image_shape,
            lambda: F.local_response_norm(image, size, alpha),
            lambda: TF.local_response_norm(image, size, alpha * size, 0.75, 2.0),
            io_image,
        ),
        Case(
            "adain", "composite", image_shape,
            lambda: F.adain(image, style),
            lambda: adain_eager(image, style),
            3 * image.nbytes,
        ),
        Case(
            "ada_layer_norm", "composite", token_shape,
            lambda: F.ada_layer_norm(tokens, shift, scale),
            lambda: ada_layer_norm_eager(tokens, shift, scale),
            io_tokens,
        ),
        Case(
            "global_response_norm", "composite", image_shape,
            lambda: F.global_response_norm(image, c_weight, c_bias),
            lambda: global_response_norm_eager(image, c_weight, c_bias),
            io_image,
        ),
        Case(
            "switchable", "composite", image_shape,
            lambda: F.switchable_norm(image, mix_mean, mix_var, c_weight, c_bias, 1e-5, *sw_running),
            lambda: switchable_norm_reference(image, mix_mean, mix_var, c_weight, c_bias, 1e-5, *sw_running),
            io_image,
        ),
    ]  # fmt: skip


# --------------------------------------------------------------------- timing


def _time_once(fn: Callable[[], torch.Tensor]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(case: Case, repeats: int) -> Result:
    """Median seconds of ours and baseline, interleaved, alternating which goes first."""
    with torch.inference_mode():
        torch.testing.assert_close(case.ours(), case.baseline(), rtol=1e-3, atol=1e-3)
        for _ in range(2):  # warm up allocator and kernels on both sides
            case.ours(), case.baseline()
        ours_times, base_times = [], []
        for i in range(repeats):
            pair = [(case.ours, ours_times), (case.baseline, base_times)]
            for fn, sink in pair if i % 2 == 0 else pair[::-1]:
                sink.append(_time_once(fn))
    ours_s, base_s = statistics.median(ours_times), statistics.median(base_times)
    if case.kind == "native":
        figure, target, met = (
            ours_s / base_s,
            f"<= {NATIVE_TARGET}",
            ours_s / base_s <= NATIVE_TARGET,
        )
    else:
        figure, target = base_s / ours_s, f">= {COMPOSITE_TARGET}"
        met = figure >= COMPOSITE_TARGET
    return Result(
        case.member, case.kind, tuple(case.shape), ours_s * 1e3, base_s * 1e3,
        case.nbytes / ours_s / 1e9, case.nbytes / base_s / 1e9, figure, target, met,
    )  # fmt: skip


def format_table(results: list[Result]) -> str:
    header = (
        "| member | kind | shape | ours ms | baseline ms | ours GB/s | baseline GB/s "
        "| figure | target | met |"
    )
    lines = [header, "|" + "---|" * 10]
    for r in results:
        label = "ours/torch" if r.kind == "native" else "eager/ours"
        lines.append(
            f"| {r.member} | {r.kind} | {'x'.join(map(str, r.shape))} | {r.ours_ms:.2f} "
            f"| {r.baseline_ms:.2f} | {r.ours_gbs:.2f} | {r.baseline_gbs:.2f} "
            f"| {label} {r.figure:.2f} | {r.target} | {'yes' if r.met else 'no'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes, few repeats")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per side")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--only", nargs="*", default=None, help="members to run")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = (QUICK_IMAGE_SHAPE, QUICK_TOKEN_SHAPE) if args.quick else (IMAGE_SHAPE, TOKEN_SHAPE)
    repeats = args.repeats or (3 if args.quick else 15)
    cases = [c for c in build_cases(*shapes) if args.only is None or c.member in args.only]
    results = [measure(case, repeats) for case in cases]
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=1))
    else:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {repeats} repeats")
        print(format_table(results))


if __name__ == "__main__":
    main()

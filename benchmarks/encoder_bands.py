"""A VGG forward to relu3_1 on the CPU whole and in bands of rows (``models.vgg.BAND_ROWS``,
each band read with its halo): time and peak RSS growth side by side, and the largest
difference between the two.

Times are the median of ``--repeats`` calls of each form, interleaved, after one warm-up;
the memory is measured in a fresh process per form (``VmHWM`` over the RSS before the
forward), so neither form reuses what the other freed. Random weights (the arithmetic
is the same as the published ones'); channels-last input, as the service runs.

Usage:
    .venv/bin/python benchmarks/encoder_bands.py [--sides 256 512 1024] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import torch

from models.vgg import BAND_ROWS, VGGEncoder


def _image(side: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(side)
    return torch.rand(1, 3, side, side, generator=generator).contiguous(
        memory_format=torch.channels_last
    )


def _forward(encoder: VGGEncoder, image: torch.Tensor, form: str) -> torch.Tensor:
    if form == "whole":
        return encoder._whole(image, {"relu3_1"})["relu3_1"]
    return encoder(image, ("relu3_1",))["relu3_1"]


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_growth_mb(side: int, form: str) -> float:
    """In this process: the forward's peak RSS growth (MB)."""
    torch.manual_seed(0)
    encoder = VGGEncoder("relu3_1").eval()
    image = _image(side)
    with torch.inference_mode():
        _forward(encoder, image[..., :64, :64], "whole")  # the first call's own setup
        before = _status_mb("VmRSS")
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # VmHWM := VmRSS
        _forward(encoder, image, form)
        return _status_mb("VmHWM") - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sides", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory-of", nargs=2, metavar=("SIDE", "FORM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_of:
        print(peak_growth_mb(int(args.memory_of[0]), args.memory_of[1]))
        return
    torch.manual_seed(0)
    encoder = VGGEncoder("relu3_1").eval()
    print(f"relu3_1 forward, bands of {BAND_ROWS} rows, {torch.get_num_threads()} threads")
    print("side | whole ms | banded ms | ratio | whole MB | banded MB | largest difference")
    for side in args.sides:
        image = _image(side)
        times: dict[str, list[float]] = {"whole": [], "banded": []}
        with torch.inference_mode():
            whole, banded = (_forward(encoder, image, form) for form in times)  # warm-up
            for _ in range(args.repeats):
                for form, spent in times.items():
                    started = time.perf_counter()
                    _forward(encoder, image, form)
                    spent.append(1e3 * (time.perf_counter() - started))
        memory = {
            form: float(
                subprocess.run(
                    [sys.executable, __file__, "--memory-of", str(side), form],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )
            for form in times
        }
        whole_ms, banded_ms = (statistics.median(times[form]) for form in times)
        difference = (whole - banded).abs().max().item()
        print(
            f"{side} | {whole_ms:.0f} | {banded_ms:.0f} | {banded_ms / whole_ms:.2f}x"
            f" | {memory['whole']:.0f} | {memory['banded']:.0f} | {difference:.1e}"
        )


if __name__ == "__main__":
    main()

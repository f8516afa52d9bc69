"""VGG to relu3_1 and its decoder on the CPU, whole and in bands of rows
(``models.bands.BAND_ROWS``, each band read with its halo): time and peak RSS growth side
by side, and the largest difference between the two.

Times are the median of ``--repeats`` calls of each form, interleaved, after one warm-up;
the memory is measured in a fresh process per form (``VmHWM`` over the RSS before the
forward), so neither form reuses what the other freed. Random weights (the arithmetic
is the same as the published ones'); channels-last input, as the service runs.

Usage:
    .venv/bin/python benchmarks/row_bands.py [--sides 256 512 1024] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import torch

from models.bands import BAND_ROWS
from models.decoder import Decoder
from models.vgg import VGGEncoder

NETWORKS = ("encoder", "decoder")


def _network(name: str) -> VGGEncoder | Decoder:
    torch.manual_seed(0)
    return (VGGEncoder("relu3_1") if name == "encoder" else Decoder("relu3_1")).eval()


def _input(name: str, side: int) -> torch.Tensor:
    """The encoder's image, or the decoder's relu3_1 features, of a ``side`` px image."""
    generator = torch.Generator().manual_seed(side)
    shape = (1, 3, side, side) if name == "encoder" else (1, 256, side // 4, side // 4)
    return torch.rand(shape, generator=generator).contiguous(memory_format=torch.channels_last)


def _forward(network: VGGEncoder | Decoder, x: torch.Tensor, form: str) -> torch.Tensor:
    if isinstance(network, VGGEncoder):
        if form == "whole":
            return network._whole(x, {"relu3_1"})["relu3_1"]
        return network(x, ("relu3_1",))["relu3_1"]
    return network._decode(x) if form == "whole" else network(x)


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_growth_mb(name: str, side: int, form: str) -> float:
    """In this process: the forward's peak RSS growth (MB)."""
    network, x = _network(name), _input(name, side)
    with torch.inference_mode():
        _forward(network, x[..., :16, :16], "whole")  # the first call's own setup
        before = _status_mb("VmRSS")
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # VmHWM := VmRSS
        _forward(network, x, form)
        return _status_mb("VmHWM") - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sides", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory-of", nargs=3, help=argparse.SUPPRESS)  # NAME SIDE FORM
    args = parser.parse_args()
    if args.memory_of:
        name, side, form = args.memory_of
        print(peak_growth_mb(name, int(side), form))
        return
    print(f"relu3_1, bands of {BAND_ROWS} image rows, {torch.get_num_threads()} threads")
    print(
        "network | side | whole ms | banded ms | ratio | whole MB | banded MB | largest difference"
    )
    for name in NETWORKS:
        network = _network(name)
        for side in args.sides:
            _measure(network, name, side, args.repeats)


def _measure(network: VGGEncoder | Decoder, name: str, side: int, repeats: int) -> None:
    x = _input(name, side)
    times: dict[str, list[float]] = {"whole": [], "banded": []}
    with torch.inference_mode():
        whole, banded = (_forward(network, x, form) for form in times)  # warm-up
        for _ in range(repeats):
            for form, spent in times.items():
                started = time.perf_counter()
                _forward(network, x, form)
                spent.append(1e3 * (time.perf_counter() - started))
    memory = {
        form: float(
            subprocess.run(
                [sys.executable, __file__, "--memory-of", name, str(side), form],
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
        f"{name} | {side} | {whole_ms:.0f} | {banded_ms:.0f} | {banded_ms / whole_ms:.2f}x"
        f" | {memory['whole']:.0f} | {memory['banded']:.0f} | {difference:.1e}"
    )


if __name__ == "__main__":
    main()

"""What the side of a print's tiles costs: one print painted in process for each tile
side, side by side in one run, with its seconds and its peak RSS growth by kind of step.

Each tile side paints the same print (a ``--side`` px photo of smooth random colour kept
on disk, as a served print's is; one 256 px noise style; the default options) in a
process of its own, step by step as the service runs it (``PrintStylization``'s
phases, every step on the CPU model, the freed memory given back after each phase), with
``atelier serve``'s malloc tuning. The peak RSS (``VmHWM``) is reset before each step:
the table gives the largest growth over the child's RSS before the print for the base,
the octaves' statistics and their tiles, and the print's seconds (and their ratio to the
first side's).

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/print_tiles.py --side 8192
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from serve_process import peak_rss_mb, reset_peak_rss, rss_mb

from models.adain import StyleTransfer
from models.adain.large import PrintStylization
from models.devices import return_freed_memory
from models.disk_picture import DiskPicture
from service.cli.serve import tune_glibc_malloc


def smooth_picture(side: int, seed: int) -> DiskPicture:
    """A ``side`` px square of smooth colour (per channel, a product of two waves of random
    frequency and phase, a few periods across the picture), on disk."""
    generator = torch.Generator().manual_seed(seed)
    frequency = (1 + 5 * torch.rand(3, 2, generator=generator)) * 2 * torch.pi / side
    phase = 2 * torch.pi * torch.rand(3, 2, generator=generator)
    columns = torch.arange(side).float()
    across = torch.sin(frequency[:, 1:] * columns + phase[:, 1:])[:, None]  # (3, 1, W)
    picture = DiskPicture((3, side, side), torch.uint8)
    for top in range(0, side, 256):
        rows = torch.arange(top, min(top + 256, side)).float()
        down = torch.sin(frequency[:, :1] * rows + phase[:, :1])[:, :, None]  # (3, n, 1)
        picture.write(top, 0, (down * across).add(1).mul(127.5).round().to(torch.uint8))
    return picture


def paint(model: StyleTransfer, side: int, tile_side: int) -> dict[str, float]:
    """One print with tiles of ``tile_side``: its seconds and peak growth per step kind."""
    photo = smooth_picture(side, seed=0)
    style = torch.rand(1, 3, 256, 256, generator=torch.Generator().manual_seed(1))
    return_freed_memory()
    pid = os.getpid()
    before = rss_mb(pid)
    peaks = {"base": 0.0, "statistics": 0.0, "tiles": 0.0}
    started = time.perf_counter()
    session = PrintStylization(photo, [style], base_side=model.base_side, tile_side=tile_side)
    for phase in session.phases():
        for step in phase:
            reset_peak_rss(pid)
            session.accept(step, session.run_step(model, step))
            peaks[step.kind] = max(peaks[step.kind], peak_rss_mb(pid) - before)
        return_freed_memory()
    return {**peaks, "seconds": time.perf_counter() - started}


def in_child(side: int, tile_side: int, weights: Path) -> dict[str, float]:
    """:func:`paint` in a process of its own (a forked one would inherit the parent's
    thread pools mid-way), its figures read back."""
    command = [sys.executable, __file__, "--side", str(side), "--weights", str(weights)]
    child = subprocess.run(
        [*command, "--child", str(tile_side)], check=True, capture_output=True, text=True
    )
    figures: dict[str, float] = json.loads(child.stdout.splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, default=8192, help="the print's side")
    parser.add_argument("--tile-sides", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--weights", type=Path, default=Path(os.environ["ATELIER_WEIGHTS_DIR"]))
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)  # one tile side, here
    args = parser.parse_args()
    if args.child:
        tune_glibc_malloc()
        model = StyleTransfer.from_pretrained([args.weights], device="cpu", fast=True)
        model.stylize(torch.rand(1, 3, 64, 64), [torch.rand(1, 3, 64, 64)])  # lazy set-up
        print(json.dumps(paint(model, args.side, args.child)))
        return
    print(f"{args.side} px print | peak RSS growth (MB): base | statistics | tiles | seconds")
    first = None
    for tile_side in args.tile_sides:
        figures = in_child(args.side, tile_side, args.weights)
        first = first or figures["seconds"]
        print(
            f"tiles of {tile_side:4} px | {figures['base']:5.0f} | {figures['statistics']:5.0f}"
            f" | {figures['tiles']:5.0f} | {figures['seconds']:6.1f}"
            f" ({figures['seconds'] / first:.2f}x)"
        )


if __name__ == "__main__":
    main()

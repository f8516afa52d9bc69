"""Seconds per pixel-pass of each preset: what sizes the stylize cost budget.

The stylize route bounds a request by ``size^2 x (1 + styles x max(1, style_scale)^2) x
passes`` pixel-passes, ``passes`` being the model's own figure for the preset
(``StyleTransfer.full_size_passes``: each pass counts the share of the photo's pixels it
runs on). This runs the served model (fast path, as the workers load it) on random
images in the cases the route admits, times each (interleaved rounds, the median), and
prints its cost, seconds and microseconds per pixel-pass: the budget a deadline allows
is ``deadline / (s per pixel-pass)`` of the dearest case.

    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/stylize_cost.py \\
        [--size 1024] [--repeats 3]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path

import torch

from models.adain import StyleTransfer
from models.adain.presets import PRESETS

#: (styles, masks, alpha): one plain style, and the dearest request the route admits.
CASES = [(1, False, 1.0), (4, True, 0.5)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1024, help="longer side of the photo")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the median is shown")
    parser.add_argument("--weights", type=Path, default=Path(os.environ["ATELIER_WEIGHTS_DIR"]))
    args = parser.parse_args()
    model = StyleTransfer.from_pretrained([args.weights], fast=True)
    model.warm_up()
    height, width = args.size * 3 // 4, args.size
    gen = torch.Generator().manual_seed(0)
    content = torch.rand(1, 3, height, width, generator=gen)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; photo {width}x{height}")
    print(f"{'preset':>9} {'styles':>6} {'masks':>5} {'passes':>8} {'pixel-passes':>13} "
          f"{'s':>7} {'us/pixel-pass':>14}")  # fmt: skip
    runs = []
    for styles, masked, alpha in CASES:
        style_images = [
            torch.rand(1, 3, args.size, args.size, generator=gen) for _ in range(styles)
        ]
        masks = None
        if masked:
            columns = torch.arange(width) * styles // width
            masks = [(columns == k).float().expand(1, 1, height, width) for k in range(styles)]
        for name in PRESETS:
            runs.append((name, styles, masks, alpha, style_images))
    seconds: dict[int, list[float]] = {index: [] for index in range(len(runs))}
    for _ in range(args.repeats):  # interleaved: every case once per round
        for index, (name, _, masks, alpha, style_images) in enumerate(runs):
            model.cache.clear()
            start = time.perf_counter()
            model.stylize(content, style_images, masks=masks, alpha=alpha, preset=name)
            seconds[index].append(time.perf_counter() - start)
    for index, (name, styles, masks, _, _) in enumerate(runs):
        passes = model.full_size_passes(name)
        cost = math.ceil(args.size**2 * (1 + styles) * passes)
        median = statistics.median(seconds[index])
        print(f"{name:>9} {styles:>6} {'yes' if masks else 'no':>5} {passes:>8.4f} "
              f"{cost:>13} {median:>7.1f} {median / cost * 1e6:>14.2f}")  # fmt: skip


if __name__ == "__main__":
    main()

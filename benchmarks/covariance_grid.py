"""The content covariance of a WCT pass: every position against the regular grid.

``models.adain.whitening.feature_covariance`` reads a map of more than
``COVARIANCE_POSITIONS`` positions on a grid of stride ``ceil(sqrt(HW / limit))``. This
times both on relu1_1-shaped maps (64 channels, channels-last, a ReLU of Gaussian noise)
for photos of 512 and 1024 px, interleaved call by call, and prints the medians, their
ratio and how far the grid's covariance is from the full one (largest entry difference
over the largest entry). Then the centring of a grid map the caller gives up
(``scratch=True``, centred in place) against one it keeps (a centred copy is written).

    python benchmarks/covariance_grid.py [--calls 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from models.adain.whitening import COVARIANCE_POSITIONS, feature_covariance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=15)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    generator = torch.Generator().manual_seed(0)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, grid limit {COVARIANCE_POSITIONS}"
    )
    for height, width in ((344, 514), (684, 1026)):  # relu1_1 of a padded 512 / 1024 px photo
        noise = torch.randn(1, 64, height, width, generator=generator)
        features = torch.relu(noise * 3 + 1).contiguous(memory_format=torch.channels_last)
        every = height * width
        timings: dict[str, list[float]] = {"every position": [], "grid": []}
        for call in range(args.calls + 2):
            for name, limit in (("every position", every), ("grid", COVARIANCE_POSITIONS)):
                start = time.perf_counter()
                feature_covariance(features, limit)
                if call >= 2:  # two warm-up calls
                    timings[name].append((time.perf_counter() - start) * 1000)
        full = feature_covariance(features, every)[1]
        grid = feature_covariance(features, COVARIANCE_POSITIONS)[1]
        error = ((grid - full).abs().max() / full.abs().max()).item()
        medians = {name: statistics.median(values) for name, values in timings.items()}
        print(
            f"{height} x {width}: every position {medians['every position']:.1f} ms, "
            f"grid {medians['grid']:.1f} ms ({medians['every position'] / medians['grid']:.2f}x); "
            f"grid covariance off by {error:.2e} of its largest entry"
        )
    # the banded relu1_1 pass's grid map: 65,536 positions, channels-last, flattened
    grid_map = torch.relu(torch.randn(1, 64, 256, 256, generator=generator) * 3 + 1)
    positions = grid_map.contiguous(memory_format=torch.channels_last).flatten(2)
    centring: dict[str, list[float]] = {"centred copy": [], "scratch": []}
    for call in range(args.calls + 2):
        for name, scratch in (("centred copy", False), ("scratch", True)):
            fresh = positions.clone(memory_format=torch.preserve_format)  # outside the timer
            start = time.perf_counter()
            feature_covariance(fresh, scratch=scratch)
            if call >= 2:
                centring[name].append((time.perf_counter() - start) * 1000)
    copy_ms, scratch_ms = (statistics.median(centring[name]) for name in centring)
    print(
        f"65,536 x 64 positions: centred copy {copy_ms:.1f} ms, centred in place "
        f"(scratch) {scratch_ms:.1f} ms ({copy_ms / scratch_ms:.2f}x)"
    )


if __name__ == "__main__":
    main()

"""The WCT content covariance with a centred copy against centring in place, in one run.

A folded WCT pass (``wct_affine(..., overwrite=True)``) centres its own features in place
instead of writing a centred copy. For each shape and memory format the two are timed
interleaved (copy, in place, in place, copy, ...) on fresh clones of the same random
ReLU map (the clone is not timed), and the table gives the medians, their ratio and the
largest difference of the covariances (the same values are centred, so it is 0). The
shapes are the relu1_1 maps of the presets' last two stages for a 512 px photo.

    python benchmarks/covariance_bench.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from models.adain.whitening import _covariance

SHAPES = [(1, 64, 512, 512), (1, 64, 256, 256)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    gen = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        f"{'shape':>20} {'layout':>13} {'copy ms':>8} {'in place ms':>12} {'ratio':>6} "
        f"{'max |diff|':>11}"
    )
    for shape in SHAPES:
        for layout in (torch.contiguous_format, torch.channels_last):
            features = torch.randn(shape, generator=gen).add_(0.5).relu_()
            features = features.contiguous(memory_format=layout)
            times: dict[bool, list[float]] = {False: [], True: []}
            results = {}
            for index in range(args.repeats):
                order = (False, True) if index % 2 == 0 else (True, False)
                for in_place in order:
                    work = features.clone(memory_format=layout)
                    start = time.perf_counter()
                    results[in_place] = _covariance(work, centre_in_place=in_place)[1]
                    times[in_place].append((time.perf_counter() - start) * 1000)
            copy_ms, in_place_ms = statistics.median(times[False]), statistics.median(times[True])
            difference = float((results[True] - results[False]).abs().max())
            name = "channels_last" if layout == torch.channels_last else "contiguous"
            print(
                f"{str(shape):>20} {name:>13} {copy_ms:>8.1f} {in_place_ms:>12.1f} "
                f"{copy_ms / in_place_ms:>5.2f}x {difference:>11.1e}"
            )


if __name__ == "__main__":
    main()

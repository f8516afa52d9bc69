"""The WCT's ``C x C`` eigendecomposition on one intra-op thread against all of them.

``models.adain.whitening`` runs its covariance-sized algebra on one thread
(``one_thread``). This times ``torch.linalg.eigh`` of float64 covariances of the sizes the
presets meet (relu1_1: 64, relu2_1: 128, relu3_1: 256 channels) with one thread and with
``torch.get_num_threads()`` threads, the two alternating call by call, and prints the
fastest and the median of each and their ratio. Run it on the machine that serves: the
answer depends on its cores and its load.

Usage:
    python benchmarks/whitening_threads.py [--calls 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def covariance(channels: int, generator: torch.Generator) -> torch.Tensor:
    """A float64 covariance of ``channels`` correlated features at 4 x ``channels`` positions."""
    features = torch.randn(1, channels, 4 * channels, generator=generator, dtype=torch.float64)
    features = torch.randn(channels, channels, generator=generator, dtype=torch.float64) @ features
    centred = features - features.mean(dim=2, keepdim=True)
    return centred @ centred.transpose(1, 2) / features.shape[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=30, help="timed calls per thread count")
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads")
    print(f"{'C':>4} {'threads':>8} {'fastest ms':>11} {'median ms':>10} {'median x one':>13}")
    for channels in (64, 128, 256):
        matrix = covariance(channels, generator)
        times: dict[int, list[float]] = {1: [], threads: []}
        for call in range(args.calls + 1):
            for count in times:
                torch.set_num_threads(count)
                start = time.perf_counter()
                torch.linalg.eigh(matrix)
                if call:  # the first call of each is a warm-up
                    times[count].append((time.perf_counter() - start) * 1000)
        torch.set_num_threads(threads)
        one = statistics.median(times[1])
        for count, values in times.items():
            median = statistics.median(values)
            print(
                f"{channels:>4} {count:>8} {min(values):>11.1f} {median:>10.1f} {median / one:>13.2f}"
            )


if __name__ == "__main__":
    main()

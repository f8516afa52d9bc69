"""ThingsDataset items per second on one core: what the training loop pays per sample.

The process is pinned to one thread (torch and numpy), the sprite caches are warmed on
``--warm`` items (the first pass draws every glyph once), then ``--items`` fresh items
are timed; both wall time and this process's CPU time are reported, since on a shared
machine the wall figure also counts waiting for the core.

Usage:
    python benchmarks/things_data_bench.py [--warm 20000] [--items 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from models.things import ThingsDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warm", type=int, default=20_000)
    parser.add_argument("--items", type=int, default=5_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dataset = ThingsDataset(seed=0, length=10**9)
    for i in range(args.warm):
        dataset[i]
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(args.warm, args.warm + args.items):
        dataset[i]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(
        json.dumps(
            {
                "items": args.items,
                "warm": args.warm,
                "items_per_s_wall": round(args.items / wall, 1),
                "items_per_s_cpu": round(args.items / cpu, 1),
                "load_average_1min": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()

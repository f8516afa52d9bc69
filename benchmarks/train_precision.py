"""DiT training step time in float32 against bfloat16 autocast, on this machine's CPU.

Why ``precision="auto"`` autocasts to bfloat16 only where the device runs it natively
(``models.devices.bf16_supported``): without AVX512-BF16/AMX a CPU still runs bf16
autocast, but by converting around float32 kernels, which is slower than float32.
Steps of the two trainers alternate (same preset, data and seed), after one warm-up each.

    python benchmarks/train_precision.py                     # shapes32, batch 32, 5 repeats
    python benchmarks/train_precision.py --preset tiny --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from models.devices import bf16_supported
from models.dit.train import TrainConfig, Trainer
from models.text_encoder import HashedWordEncoder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="shapes32")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    encoder = HashedWordEncoder()
    trainers = {
        precision: Trainer(
            TrainConfig(preset=args.preset, batch_size=args.batch_size, precision=precision),
            encoder=encoder,
        )
        for precision in ("fp32", "bf16")
    }
    for trainer in trainers.values():
        trainer.train_step()  # warm-up: kernels, caption cache
    seconds: dict[str, list[float]] = {precision: [] for precision in trainers}
    for _ in range(args.repeats):
        for precision, trainer in trainers.items():
            start = time.perf_counter()
            trainer.train_step()
            seconds[precision].append(time.perf_counter() - start)
    median = {precision: statistics.median(times) for precision, times in seconds.items()}
    print(f"native bf16 on this CPU: {bf16_supported('cpu')}")
    print(
        f"{args.preset}, batch {args.batch_size}, {args.threads} threads, median of {args.repeats}"
    )
    for precision, value in median.items():
        print(f"  {precision:>4}: {value:7.3f} s/step")
    print(f"  bf16 / fp32: {median['bf16'] / median['fp32']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

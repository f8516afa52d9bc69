"""Speed of ``norms``' moments against ``torch.var_mean`` on feature maps, in one run.

For each shape and memory format the two are timed interleaved (ours, var_mean,
var_mean, ours, ...) in inference mode, and the table gives the medians, their ratio
and the largest relative error of each against a float64 reference. The shapes are the
AdaIN feature maps of a 512 px photo (relu1_1 / relu2_1 / relu3_1) and a batch-norm
sized map.

    python benchmarks/moments_bench.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from norms.functional._stats import moments

SHAPES = [(1, 64, 342, 512), (1, 128, 171, 256), (1, 256, 86, 128), (8, 64, 128, 128)]


def relative_error(mean, var, reference) -> float:
    ref_var, ref_mean = reference
    spread = ref_var.sqrt()
    mean_error = ((mean.double() - ref_mean).abs() / (ref_mean.abs() + spread)).max()
    return max(float(mean_error), float(((var.double() - ref_var).abs() / ref_var).max()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    gen = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; dims (2, 3)")
    print(
        f"{'shape':>20} {'layout':>13} {'var_mean ms':>12} {'moments ms':>11} "
        f"{'speed-up':>9} {'err var_mean':>13} {'err moments':>12}"
    )
    for shape in SHAPES:
        for layout in (torch.contiguous_format, torch.channels_last):
            x = (torch.randn(*shape, generator=gen) * 3.0 + 5.0).contiguous(memory_format=layout)

            def ours(x=x):
                return moments(x, (2, 3))

            def theirs(x=x):
                return torch.var_mean(x, dim=(2, 3), correction=0, keepdim=True)

            ours(), theirs()
            times: dict[str, list[float]] = {"ours": [], "theirs": []}
            for repeat in range(args.repeats):
                order = ("ours", "theirs") if repeat % 2 == 0 else ("theirs", "ours")
                for name in order:
                    start = time.perf_counter()
                    (ours if name == "ours" else theirs)()
                    times[name].append((time.perf_counter() - start) * 1000)
            reference = torch.var_mean(x.double(), dim=(2, 3), correction=0, keepdim=True)
            var, mean = theirs()
            error_theirs = relative_error(mean, var, reference)
            error_ours = relative_error(*ours(), reference)
            ms_ours, ms_theirs = (
                statistics.median(times["ours"]),
                statistics.median(times["theirs"]),
            )
            name = "channels_last" if layout is torch.channels_last else "contiguous"
            print(
                f"{str(shape):>20} {name:>13} {ms_theirs:>12.2f} {ms_ours:>11.2f} "
                f"{ms_theirs / ms_ours:>8.1f}x {error_theirs:>13.1e} {error_ours:>12.1e}"
            )


if __name__ == "__main__":
    main()

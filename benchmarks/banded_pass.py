"""A relu1_1 WCT pass on the CPU: the whole map against the banded form.

The whole-map form (``encoder.encode`` -> ``wct_affine`` -> ``Decoder.forward_linear``,
what a GPU and a pass with masks or ``alpha < 1`` still run), on a contiguous image and
on a channels-last one (the layout of ``fast=True``, which the service loads), against
:class:`models.adain.banded.BandedRelu11` (what a folded relu1_1 pass runs on a CPU), on
square photos of 256, 512 and 1024 px with the shared weights, interleaved call by call.
Prints the medians, the ratios to the banded form, and the largest difference between
the outputs.

    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/banded_pass.py [--calls 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from models.adain import StyleTransfer
from models.adain.banded import BandedRelu11
from models.adain.whitening import CovarianceStats, grid_stride, wct_affine
from service.config import Settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--sides", type=int, nargs="+", default=[256, 512, 1024])
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    model = StyleTransfer.from_pretrained(Settings().weight_search_path())
    encoder, decoder = model.encoder, model.decoders["relu1_1"]
    banded = BandedRelu11(encoder, decoder)
    generator = torch.Generator().manual_seed(0)
    style = CovarianceStats.of(
        encoder.encode(torch.rand(1, 3, 256, 256, generator=generator), "relu1_1")
    )
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.calls} calls each")

    def whole_map(image: torch.Tensor) -> torch.Tensor:
        features = encoder.encode(image, "relu1_1")
        matrix, shift = wct_affine(features, [style], weights=[1.0])
        return decoder.forward_linear(features, matrix, shift)

    def in_bands(image: torch.Tensor) -> torch.Tensor:
        padded = banded.padded_input(image)
        grid = banded.grid_features(padded, grid_stride(*image.shape[-2:]))
        matrix, shift = wct_affine(grid, [style], weights=[1.0])
        return banded.decode(padded, matrix, shift)

    def whole_map_channels_last(image: torch.Tensor) -> torch.Tensor:
        return whole_map(image.contiguous(memory_format=torch.channels_last))

    forms = {
        "whole map": whole_map,
        "whole map, channels-last": whole_map_channels_last,
        "banded": in_bands,
    }
    for side in args.sides:
        image = torch.rand(1, 3, side, side, generator=generator)
        difference = max(
            (form(image) - in_bands(image)).abs().max().item()
            for form in (whole_map, whole_map_channels_last)
        )
        timings: dict[str, list[float]] = {name: [] for name in forms}
        for call in range(args.calls + 2):
            for name, form in forms.items():
                start = time.perf_counter()
                form(image)
                if call >= 2:  # two warm-up calls
                    timings[name].append(time.perf_counter() - start)
        medians = {name: 1000 * statistics.median(times) for name, times in timings.items()}
        banded_ms = medians["banded"]
        print(
            f"{side} x {side}: banded {banded_ms:.1f} ms; "
            + ", ".join(
                f"{name} {ms:.1f} ms ({ms / banded_ms:.2f}x)"
                for name, ms in medians.items()
                if name != "banded"
            )
            + f"; max |difference| {difference:.1e}"
        )


if __name__ == "__main__":
    main()

"""A relu1_1 WCT pass on the CPU: the whole map against the banded form.

The whole-map form (``encoder.encode`` -> ``wct_affine`` -> ``Decoder.forward_linear``,
what a GPU and a pass with masks or ``alpha < 1`` still run) against
:class:`models.adain.banded.BandedRelu11` (what a folded relu1_1 pass runs on a CPU), on
square photos of 256, 512 and 1024 px with the shared weights, interleaved call by call.
Prints the medians, their ratio, and the largest difference between the two outputs.

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

    forms = {"whole map": whole_map, "banded": in_bands}
    for side in args.sides:
        image = torch.rand(1, 3, side, side, generator=generator)
        difference = (whole_map(image) - in_bands(image)).abs().max().item()
        timings: dict[str, list[float]] = {name: [] for name in forms}
        for call in range(args.calls + 2):
            for name, form in forms.items():
                start = time.perf_counter()
                form(image)
                if call >= 2:  # two warm-up calls
                    timings[name].append(time.perf_counter() - start)
        medians = {name: 1000 * statistics.median(times) for name, times in timings.items()}
        print(
            f"{side} x {side}: whole map {medians['whole map']:.1f} ms, banded "
            f"{medians['banded']:.1f} ms ({medians['whole map'] / medians['banded']:.2f}x), "
            f"max |difference| {difference:.1e}"
        )


if __name__ == "__main__":
    main()

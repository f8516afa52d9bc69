"""AdaIN quality report on the shared photos and paintings (the targets of
docs/style-transfer.md).

Prints, for each mode compared (the default pass first):
- the style-loss ratio of every photo x painting pair at 256 px (median, max; targets
  median <= 0.12, every pair <= 0.45; stretch: every pair <= 1/3);
- reconstruction PSNR (alpha = 0) of every photo at 512 px (target >= 27 dB);
- with preserve-color, the largest |mean Cb/Cr difference| to the photo, in 1/255
  (target <= 3);
- with two masks (left / right halves, two paintings), the style loss of each region
  against its own painting and against the other one (own should be lower).

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/adain_quality.py \
        [--images ../shared/images] [--modes relu3_1 relu3_1,relu2_1,relu1_1]
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import torch

from models.adain import DEFAULT_LEVELS, StyleTransfer
from models.adain.color import rgb_to_ycbcr
from models.adain.metrics import psnr, style_loss, style_loss_ratio
from models.images import load_image

REPO = Path(__file__).resolve().parent.parent


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--weights", type=Path, default=Path(os.environ.get("ATELIER_WEIGHTS_DIR", "weights"))
    )
    parser.add_argument("--images", type=Path, default=REPO.parent / "shared" / "images")
    parser.add_argument(
        "--modes",
        nargs="+",
        default=[",".join(DEFAULT_LEVELS), "relu3_1"],
        help="passes to compare, each a comma list of levels, deepest first",
    )
    parser.add_argument("--size", type=int, default=256, help="long side for the style metrics")
    parser.add_argument("--recon-size", type=int, default=512, help="long side for reconstruction")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_grad_enabled(False)
    photos = sorted((args.images / "content").iterdir())
    paintings = sorted((args.images / "style").iterdir())
    model = StyleTransfer.from_pretrained([args.weights], fast=False)  # the float32 reference
    encoder = model.encoder
    content = {p.stem: load_image(p, max_side=args.size) for p in photos}
    styles = {p.stem: load_image(p, max_side=args.size) for p in paintings}
    big = {p.stem: load_image(p, max_side=args.recon_size) for p in photos}
    for mode in args.modes:
        levels = tuple(mode.split(","))
        print(f"== mode {' -> '.join(levels)}")
        ratios = {}
        for photo, image in content.items():
            for painting, style in styles.items():
                out = model.stylize(image, [style], levels=levels)
                ratios[(photo, painting)] = float(style_loss_ratio(encoder, out, image, style)[0])
        for (photo, painting), ratio in sorted(ratios.items()):
            print(f"style_loss_ratio {photo:>10} x {painting:<32} {ratio:.3f}")
        values = list(ratios.values())
        print(
            f"style_loss_ratio median {statistics.median(values):.3f} (target <= 0.12)  "
            f"max {max(values):.3f} (target <= 0.45, stretch <= 0.333)"
        )
        for photo, image in big.items():
            out = model.stylize(image, [styles[paintings[0].stem]], alpha=0.0, levels=levels)
            print(
                f"reconstruction_psnr_db {photo:>10} {float(psnr(out, image)[0]):.2f} (target >= 27, {tuple(image.shape[-2:])})"
            )
        worst_chroma = 0.0
        for image in content.values():
            for style in styles.values():
                out = model.stylize(image, [style], preserve_color=True, levels=levels)
                diff = (
                    (rgb_to_ycbcr(out)[:, 1:] - rgb_to_ycbcr(image)[:, 1:])
                    .mean(dim=(0, 2, 3))
                    .abs()
                )
                worst_chroma = max(worst_chroma, float(diff.max()) * 255)
        print(f"preserve_color max |mean CbCr difference| {worst_chroma:.2f} /255 (target <= 3)")
        names = list(styles)[:2]
        for photo, image in content.items():
            width = image.shape[-1]
            left = torch.zeros(1, 1, *image.shape[-2:])
            left[..., : width // 2] = 1.0
            out = model.stylize(
                image, [styles[names[0]], styles[names[1]]], masks=[left, 1 - left], levels=levels
            )
            halves = {"left": out[..., : width // 2 - 8], "right": out[..., width // 2 + 8 :]}
            own = {"left": names[0], "right": names[1]}
            for side, region in halves.items():
                other = names[1] if own[side] == names[0] else names[0]
                mine = float(style_loss(encoder, region, styles[own[side]])[0])
                theirs = float(style_loss(encoder, region, styles[other])[0])
                print(
                    f"mask_region_style_loss {photo:>10} {side:<5} own {own[side]} {mine:.1f}  other {other} {theirs:.1f}"
                )


if __name__ == "__main__":
    main()

"""Realtime preset: ways to fill the band the 128 px working scale drops (development only).

An experiment, not a product benchmark: it compares, on the development images only
(the shared photos and paintings plus three scikit-image textures outside the evaluation
split: grass, retina, moon), what the realtime preset adds to the upsampled stylisation
``up(T(x_down))`` before its full-size relu1_1 pass:

- ``gain``: the photo's detail band ``d_x = x - up(x_down)`` times the matched gain
  ``g = clip(sqrt(E(s) / E(x)), 1, 4)`` (the preset before this experiment);
- ``mirror``: ``d_x`` plus the style's detail band ``d_s``, mirror-tiled in place, with
  the weight ``b = sqrt(max(0, 1 - E(x) / E(s)))`` that brings the energy up to ``E(s)``;
- ``phase``: ``d_x`` plus ``b`` times ``d_s`` with its Fourier phases randomised
  (a random-phase texture: ``d_s``'s power spectrum, no structure);
- ``shuffle-K``: ``d_x`` plus ``b`` times ``d_s``'s K-pixel blocks in a shuffled order,
  overlap-added with a sine window (``models.adain.presets.shuffled_texture``);
- ``matched-K``: as ``shuffle-K``, and a photo with more fine detail than the style has
  its detail band scaled down to the style's energy, ``d_x sqrt(min(1, E(s) / E(x)))``
  (the preset since this experiment: ``models.adain.presets.matched_detail``).

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/adain_texture_variants.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812

from models.adain import StyleTransfer
from models.adain.images import load_image
from models.adain.metrics import content_loss, style_loss_ratio
from models.adain.presets import (
    PRESETS,
    detail_band,
    detail_weights,
    energy,
    scale_image,
    shuffled_texture,
)

REPO = Path(__file__).resolve().parent.parent
DEV_TEXTURES = ("grass.png", "retina.jpg", "moon.png")


def _upsample(image: torch.Tensor, size) -> torch.Tensor:
    return F.interpolate(image, size=size, mode="bilinear", align_corners=False)


def _mirror_tiled(detail: torch.Tensor, size) -> torch.Tensor:
    def index(n: int, period: int) -> torch.Tensor:
        i = torch.arange(n) % (2 * period)
        return torch.where(i < period, i, 2 * period - 1 - i)

    return detail.index_select(-2, index(size[0], detail.shape[-2])).index_select(
        -1, index(size[1], detail.shape[-1])
    )


def _random_phase(detail: torch.Tensor, size) -> torch.Tensor:
    noise = torch.rand(detail.shape[-2:], generator=torch.Generator().manual_seed(0))
    phase = torch.fft.fft2(noise)
    phase = phase / phase.abs().clamp_min(1e-12)
    phase[0, 0] = 1
    texture = torch.fft.ifft2(torch.fft.fft2(detail) * phase).real
    rows = torch.arange(size[0]) % detail.shape[-2]
    cols = torch.arange(size[1]) % detail.shape[-1]
    return texture.index_select(-2, rows).index_select(-1, cols)


def variant(model: StyleTransfer, fill: str):
    preset = PRESETS["realtime"]

    def run(content: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        small = preset.downscale(content)
        style_small = scale_image(style, small.shape[-1] / content.shape[-1], min_side=16)
        low = model.stylize(small, [style_small], levels=preset.levels, preset="quality")
        size = content.shape[-2:]
        photo_detail = detail_band(content, small)
        style_detail = detail_band(style, style_small)
        photo_energy, style_energy = energy(photo_detail), energy(style_detail)
        image = _upsample(low, size)
        if fill == "gain":
            gain = (style_energy / photo_energy).sqrt().clamp(1.0, 4.0).view(-1, 1, 1, 1)
            image = image + gain * photo_detail
        else:
            texture = {
                "mirror": lambda: _mirror_tiled(style_detail, size),
                "phase": lambda: _random_phase(style_detail, size),
            }.get(fill, lambda: shuffled_texture(style_detail, size, block=int(fill[8:])))()
            photo_weight, texture_weight = detail_weights(photo_energy, style_energy)
            if fill.startswith("matched"):
                photo_detail = photo_weight * photo_detail
            image = image + photo_detail + texture_weight * texture
        image = image.clamp(0.0, 1.0)
        return model.stylize(image, [style], levels=preset.detail_levels, preset="quality")

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--weights", type=Path, default=Path(os.environ.get("ATELIER_WEIGHTS_DIR", "weights"))
    )
    parser.add_argument("--images", type=Path, default=REPO.parent / "shared" / "images")
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["gain", "mirror", "phase", "shuffle-8", "shuffle-16", "shuffle-32", "matched-16"],
    )
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    import skimage

    textures = [Path(skimage.__file__).parent / "data" / name for name in DEV_TEXTURES]
    photo_files = sorted((args.images / "content").iterdir())
    style_files = sorted((args.images / "style").iterdir()) + textures
    model = StyleTransfer.from_pretrained([args.weights], fast=True)
    photos = [load_image(path, max_side=args.size) for path in photo_files]
    styles = [load_image(path, max_side=args.size) for path in style_files]
    pairs = [(c, s) for c in photos for s in styles]
    print(f"development split: {len(photos)} photos x {len(styles)} styles, {args.size} px")
    print(
        f"{'variant':>11} {'ms/image':>9} {'ratio median':>13} {'ratio worst':>12} {'content':>8}"
    )
    for name in args.variants:
        run = variant(model, name)
        times, ratios, contents = [], [], []
        for content, style in pairs:
            start = time.perf_counter()
            out = run(content, style)
            times.append((time.perf_counter() - start) * 1000)
            ratios.append(float(style_loss_ratio(model.encoder, out, content, style)[0]))
            contents.append(float(content_loss(model.encoder, out, content)[0]))
        print(
            f"{name:>11} {statistics.median(times):>9.1f} {statistics.median(ratios):>13.3f} "
            f"{max(ratios):>12.3f} {statistics.mean(contents):>8.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Realtime preset: a global or a local energy match for the rebuilt detail band (development only).

An experiment, not a product benchmark. On the development images only (the shared
photos and paintings plus three scikit-image textures outside the evaluation split:
grass, retina, moon; 32 pairs at 512 px) it compares how the realtime preset weighs the
photo's detail band ``d_x`` against the style's texture ``t`` (``a d_x + b t``,
``models.adain.presets.matched_detail``):

- ``global``: ``a`` and ``b`` from the photo's mean detail energy over the whole image
  (the preset before this experiment; a window larger than the image gives exactly it);
- ``window-K``: from the photo's detail energy around each pixel, averaged over K px
  windows (``models.adain.presets.local_energy``);
- ``global+mid``: ``global``, and also the finest octave of the working-scale
  stylisation rebuilt the same way from the style at the working scale (8 px blocks).

Each pair runs every variant in turn, so the times are indicative only.

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/adain_energy_window.py
"""

from __future__ import annotations

import os
import statistics
import time
from functools import partial
from pathlib import Path

import torch

import models.adain.pipeline as pipeline
from models.adain import StyleTransfer
from models.adain.images import load_image, resize_max_side
from models.adain.metrics import content_loss, style_loss, style_loss_ratio
from models.adain.presets import PRESETS, matched_detail, restore_detail, scale_image

REPO = Path(__file__).resolve().parent.parent
DEV_TEXTURES = ("grass.png", "retina.jpg", "moon.png")
WHOLE_IMAGE = 1 << 16  # a window larger than any image: the global energy


def _dev_pairs() -> tuple[list[Path], list[Path]]:
    from adain_bench import _package_file, dev_split

    photos, paintings = dev_split(REPO.parent / "shared" / "images")
    textures = [_package_file("skimage", f"data/{name}") for name in DEV_TEXTURES]
    return photos, paintings + textures


def with_window(model: StyleTransfer, window: int):
    def run(content: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        pipeline.matched_detail = partial(matched_detail, window=window)
        try:
            return model.stylize(content, [style], preset="realtime")
        finally:
            pipeline.matched_detail = matched_detail

    return run


def with_mid_band(model: StyleTransfer):
    preset = PRESETS["realtime"]

    def finest_octave(image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return image, resize_max_side(image, max(image.shape[-2:]) // 2)

    def run(content: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        small = preset.downscale(content)
        small_style = scale_image(style, small.shape[-1] / content.shape[-1], min_side=16)
        low = model.stylize(small, [small_style], levels=preset.levels, preset="quality")
        low_image, lower = finest_octave(low)
        style_octave = finest_octave(small_style)
        low_band = low_image - torch.nn.functional.interpolate(
            lower, size=low.shape[-2:], mode="bilinear", align_corners=False
        )
        rebuilt = matched_detail(low_band, [style_octave], block=8, window=WHOLE_IMAGE)
        low = (low - low_band + rebuilt).clamp(0.0, 1.0)
        band = content - torch.nn.functional.interpolate(
            small, size=content.shape[-2:], mode="bilinear", align_corners=False
        )
        detail = matched_detail(band, [(style, small_style)], window=WHOLE_IMAGE)
        restored = restore_detail(low, detail)
        return model.stylize(restored, [style], levels=preset.detail_levels, preset="quality")

    return run


def main() -> None:
    torch.set_num_threads(2)
    torch.set_grad_enabled(False)
    weights = Path(os.environ.get("ATELIER_WEIGHTS_DIR", REPO.parent / "shared" / "weights"))
    model = StyleTransfer.from_pretrained([weights], fast=True)
    encoder = model.encoder
    variants = {
        "global": with_window(model, WHOLE_IMAGE),
        "window-16": with_window(model, 16),
        "window-32": with_window(model, 32),
        "window-64": with_window(model, 64),
        "global+mid": with_mid_band(model),
    }
    photos, styles = _dev_pairs()
    contents = [load_image(path, max_side=512) for path in photos]
    style_images = [load_image(path, max_side=512) for path in styles]
    scores: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in variants}
    for style in style_images:
        for content in contents:
            photo_loss = style_loss(encoder, content, style)
            for name, run in variants.items():
                start = time.perf_counter()
                output = run(content, style)
                seconds = time.perf_counter() - start
                ratio = float(style_loss_ratio(encoder, output, content, style))
                relu3 = float(style_loss(encoder, output, style, ["relu3_1"]) / photo_loss)
                scores[name].append(
                    (ratio, relu3, float(content_loss(encoder, output, content)), seconds)
                )
    print(f"{len(contents)} photos x {len(styles)} styles at 512 px (development images only)")
    print(
        f"{'variant':>11} {'ms/image':>9} {'ratio median':>13} {'ratio worst':>12} "
        f"{'relu3_1 part, median':>21} {'content loss':>13}"
    )
    for name, rows in scores.items():
        ratios = [row[0] for row in rows]
        print(
            f"{name:>11} {1000 * statistics.median(row[3] for row in rows):9.1f} "
            f"{statistics.median(ratios):13.3f} {max(ratios):12.3f} "
            f"{statistics.median(row[1] for row in rows):21.3f} "
            f"{statistics.mean(row[2] for row in rows):13.3f}"
        )


if __name__ == "__main__":
    main()

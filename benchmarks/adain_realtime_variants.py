"""Realtime-preset variants on the development images: style ratio, content loss, time.

An experiment, kept in the repository only for the commit that ran it (see
docs/style-transfer.md, "Development record"). Variants, all with the matched detail
gain and a final relu1_1 pass at full size:

- ``current``: relu3_1 -> relu2_1 at 128 px (the preset);
- ``pyramid-128-256`` / ``pyramid-96-224``: relu3_1 -> relu2_1 at the first side, detail
  restored to the second side, a relu2_1 pass there, detail restored to full size;
- ``four-112``: the four passes of ``quality`` at a 112 px working side.

Images: the shared development photos and paintings plus three textures that ship with
scikit-image and are not in the evaluation split (grass, retina, moon), 512 px.

    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/adain_realtime_variants.py
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path

import torch
from adain_bench import REPO, _package_file, dev_split  # a sibling: run as a script

from models.adain import StyleTransfer
from models.adain.images import load_image, resize_max_side
from models.adain.metrics import content_loss, style_loss_ratio
from models.adain.presets import PRESETS, matched_detail_gain, restore_detail, scale_image

DEV_TEXTURES = ("grass.png", "retina.jpg", "moon.png")


def with_preset(model: StyleTransfer, content, style, **changes):
    base = PRESETS["realtime"]
    PRESETS["realtime"] = dataclasses.replace(base, **changes)
    try:
        return model.stylize(content, [style], preset="realtime")
    finally:
        PRESETS["realtime"] = base


def pyramid(model: StyleTransfer, first: int, middle: int):
    def run(content, style):
        small = resize_max_side(content, middle)
        small_style = scale_image(style, small.shape[-1] / content.shape[-1], min_side=16)
        mid = with_preset(model, small, small_style, working_side=first, detail_levels=("relu2_1",))
        bounds = PRESETS["realtime"].detail_gain_bounds
        gain = matched_detail_gain(content, small, [(style, small_style)], None, bounds)
        restored = restore_detail(mid, small, content, gain=gain)
        return model.stylize(restored, [style], levels=("relu1_1",), preset="quality")

    return run


def main() -> None:
    import os

    torch.set_grad_enabled(False)
    weights = Path(os.environ.get("ATELIER_WEIGHTS_DIR", "weights"))
    model = StyleTransfer.from_pretrained([weights], fast=True)
    photos, paintings = dev_split(REPO.parent / "shared" / "images")
    styles = paintings + [_package_file("skimage", f"data/{name}") for name in DEV_TEXTURES]
    contents = [load_image(path, max_side=512) for path in photos]
    style_images = [load_image(path, max_side=512) for path in styles]
    quality_levels = ("relu3_1", "relu2_1", "relu3_1", "relu2_1")
    variants = {
        "current": lambda c, s: model.stylize(c, [s], preset="realtime"),
        "pyramid-128-256": pyramid(model, 128, 256),
        "pyramid-96-224": pyramid(model, 96, 224),
        "four-112": lambda c, s: with_preset(model, c, s, working_side=112, levels=quality_levels),
    }
    print(f"{len(contents)} photos x {len(style_images)} styles, 512 px")
    print(
        f"{'variant':>16} {'ms/image':>9} {'ratio median':>13} {'ratio worst':>12} {'content':>8}"
    )
    for name, run in variants.items():
        ratios, contents_loss, times = [], [], []
        for content in contents:
            for style in style_images:
                out = run(content, style)
                start = time.perf_counter()
                run(content, style)
                times.append((time.perf_counter() - start) * 1000)
                ratios.append(float(style_loss_ratio(model.encoder, out, content, style)[0]))
                contents_loss.append(float(content_loss(model.encoder, out, content)[0]))
        print(
            f"{name:>16} {statistics.median(times):>9.0f} {statistics.median(ratios):>13.3f} "
            f"{max(ratios):>12.3f} {statistics.mean(contents_loss):>8.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

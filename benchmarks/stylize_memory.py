"""Where a still's memory goes: one stylisation with the served model (CPU, fast path), the
process's peak RSS growth stage by stage of the preset's pyramid.

Each row is a piece of the pyramid in the order it runs: a stage's style statistics (the
style resized to the stage, encoded at the stage's levels), then the stage's passes on
the photo. Before each piece the peak RSS (``VmHWM``) is reset to the current RSS, so a
row is the highest the process went during that piece, over the RSS before the
stylisation (what earlier pieces still hold included). The last row is the whole
stylisation's peak (between the pieces too). A print's base is such a still at 1024 px
(``models.adain.large``), so its peak is part of every print's too.

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/stylize_memory.py \\
        [--size 1024] [--style-side 256] [--style-scale 1.0] [--preset quality]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import torch
from serve_process import peak_rss_mb, reset_peak_rss, rss_mb

from models.adain import StyleTransfer
from models.adain.presets import MIN_STYLE_SIDE, PRESETS, style_at
from models.adain.whitening import CovarianceStats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1024, help="side of the square photo")
    parser.add_argument("--style-side", type=int, default=256, help="side of the square style")
    parser.add_argument("--style-scale", type=float, default=1.0)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="quality")
    parser.add_argument("--weights", type=Path, default=Path(os.environ["ATELIER_WEIGHTS_DIR"]))
    args = parser.parse_args()
    torch.manual_seed(0)
    model = StyleTransfer.from_pretrained([args.weights], fast=True, cache_size=0)
    model.warm_up()
    pid = os.getpid()
    photo = torch.rand(1, 3, args.size, args.size)
    style = torch.rand(1, 3, args.style_side, args.style_side)
    rows: list[tuple[str, float]] = []
    before, highest = 0.0, 0.0

    def reset() -> None:  # the peak since the last reset counts towards the whole's
        nonlocal highest
        highest = max(highest, peak_rss_mb(pid) - before)
        reset_peak_rss(pid)

    def measured(name: str, method: Any) -> Any:
        def wrapper(
            self: StyleTransfer, image: torch.Tensor, levels: Any, *rest: Any, **kw: Any
        ) -> Any:
            reset()
            result = method(self, image, levels, *rest, **kw)
            size = "x".join(str(side) for side in image.shape[-2:])
            rows.append((f"{name} {'+'.join(levels)} at {size}", peak_rss_mb(pid) - before))
            return result

        return wrapper

    StyleTransfer.style_stats = measured("style statistics", StyleTransfer.style_stats)  # type: ignore[method-assign]
    StyleTransfer._stage = measured("passes", StyleTransfer._stage)  # type: ignore[method-assign]
    before = rss_mb(pid)
    reset_peak_rss(pid)
    with torch.inference_mode():
        model.stylize(photo, [style], preset=args.preset, style_scale=args.style_scale)
    reset()
    print(
        f"{args.preset}, photo {args.size} px, style {args.style_side} px at style_scale "
        f"{args.style_scale}: peak RSS growth over the RSS before, piece by piece (MB)"
    )
    for name, growth in rows:
        print(f"  {name:<40} {growth:7.0f}")
    print(f"  {'the whole stylisation':<40} {highest:7.0f}")
    print_grid_agreement(model, style, args.size, args.style_scale)


def print_grid_agreement(
    model: StyleTransfer, style: torch.Tensor, side: int, scale: float
) -> None:
    """How far the style's relu1_1 statistics at the full-size stage (from the grid alone
    when past the grid limit) are from those of its whole map."""
    stage_style = style_at(style, side, scale, min_side=MIN_STYLE_SIDE)
    with torch.inference_mode():
        got = model.style_stats(stage_style, ["relu1_1"], "wct")["relu1_1"]
        whole = CovarianceStats.of(model.encoder.encode(model._prepare(stage_style), "relu1_1"))
    assert isinstance(got, CovarianceStats)
    print(
        f"the style's relu1_1 statistics at {side} px against its whole map's: mean "
        f"{(got.mean - whole.mean).abs().max().item():.2e}, covariance root "
        f"{(got.root - whole.root).abs().max().item():.2e} (largest differences)"
    )


if __name__ == "__main__":
    main()

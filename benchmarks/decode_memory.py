"""What an upload's pixels cost to become the model's 8-bit RGB: the peak RSS growth of
``models.images.pil_to_uint8`` on a decoded image, per kind of image.

The images (made here, ``--side`` px square): a 16-bit greyscale PNG (a diagonal ramp
over the whole 16-bit range) and an 8-bit RGB one. Each is decoded by Pillow first; the
growth counted is the conversion's alone, in a forked child (``VmHWM`` reset before it),
over the RSS with the decoded image held, beside the size of the array it returns. Run it
against another tree to compare (``PYTHONPATH=/path/to/that/tree``).

Usage:
    python benchmarks/decode_memory.py [--side 4096]
"""

from __future__ import annotations

import argparse
import io
import os

import numpy as np
from PIL import Image
from serve_process import peak_rss_mb, reset_peak_rss, rss_mb

from models.images import pil_to_uint8


def pictures(side: int) -> dict[str, bytes]:
    """PNG bytes by name (see the module's text)."""
    ramp = np.add.outer(np.arange(side), np.arange(side)) * (65535 / (2 * side - 2))
    rgb = np.stack([ramp, ramp[::-1], ramp.T], axis=2) / 257
    found = {}
    for name, array in (
        ("16-bit grey", ramp.astype(np.uint16)),
        ("8-bit RGB", rgb.astype(np.uint8)),
    ):
        buffer = io.BytesIO()
        Image.fromarray(array).save(buffer, "PNG", compress_level=1)
        found[name] = buffer.getvalue()
    return found


def conversion_growth(data: bytes) -> tuple[float, float]:
    """The peak RSS growth (MB) of ``pil_to_uint8`` on ``data`` decoded, in a child, and
    the size of the array it returns (MB)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: decode, convert once, report, leave
        os.close(read)
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            pid = os.getpid()
            before = rss_mb(pid)
            reset_peak_rss(pid)
            pixels = pil_to_uint8(image)
            os.write(write, f"{peak_rss_mb(pid) - before} {pixels.numel() / 2**20}".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        growth, result = (float(value) for value in pipe.read().split())
    os.waitpid(child, 0)
    return growth, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", type=int, default=4096)
    args = parser.parse_args()
    for name, data in pictures(args.side).items():
        growth, result = conversion_growth(data)
        print(f"{args.side} px {name}: the conversion's peak RSS growth {growth:.0f} MB "
              f"(its array: {result:.0f} MB)")  # fmt: skip


if __name__ == "__main__":
    main()

"""A JPEG decoded a strip of rows at a time (libvips, through ``pyvips``), never whole.

Pillow holds a decoded image whole, 4 bytes a pixel: an 8192 px print's photo is
256 MiB before a single row of it is used. libvips reads a JPEG sequentially and hands
out strips as they are decoded, so a print's photo goes to its picture on disk with a
few strips in memory (``benchmarks/decode_memory.py`` measures both). Its decoder is
libjpeg-turbo, as Pillow's: at the same scale the pixels are the same.

The scales a JPEG decodes at directly (1/1, 1/2, 1/4, 1/8 of each side, rounded up, as
Pillow's ``draft``) are libjpeg's, the same here as there. A resize beyond them is not
done here: libvips' resamplers are not Pillow's (its antialiased bilinear came within
2 levels of Pillow's, not to its bytes), so such a photo is decoded whole by Pillow, and
the service has one resampler. Orientation and colour are the caller's
(:class:`models.images.Decode`): this module only decodes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

#: The scales libjpeg decodes at directly.
JPEG_SCALES = (1, 2, 4, 8)


def decoded_scale(stored: tuple[int, int], drafted: tuple[int, int]) -> int:
    """The libjpeg scale that decodes ``stored (width, height)`` at ``drafted``.

    Raises:
        ValueError: no scale gives that size.
    """
    for scale in JPEG_SCALES:
        if (math.ceil(stored[0] / scale), math.ceil(stored[1] / scale)) == drafted:
            return scale
    raise ValueError(f"no JPEG scale decodes {stored} at {drafted}")


def jpeg_strips(data: bytes, scale: int, rows: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(top, (n, W, bands) uint8)`` strips of ``rows`` rows, top to bottom, of the JPEG
    ``data`` decoded at 1/``scale``; ``bands`` is 1 (greyscale) or 3 (RGB). Each strip is
    a fresh array the caller may keep.

    Raises:
        OSError: the file does not decode (corrupt, or truncated: as Pillow's decode, a
            file that ends early fails; libjpeg's other warnings do not), or is not
            8-bit greyscale or RGB.
    """
    import pyvips  # libvips loads with the first print's photo, not with every process

    pyvips.cache_set_max(0)  # no finished operation kept (a photo would stay in memory)
    try:
        image = pyvips.Image.new_from_buffer(
            data, "", access="sequential", shrink=scale, fail_on="truncated"
        )
        if image.format != "uchar" or image.bands not in (1, 3):
            raise OSError(f"not an 8-bit greyscale or RGB JPEG ({image.bands} bands)")
        width, height = image.width, image.height
        region = pyvips.Region.new(image)
        for top in range(0, height, rows):
            count = min(rows, height - top)
            strip = np.frombuffer(region.fetch(0, top, width, count), dtype=np.uint8)
            yield top, strip.reshape(count, width, image.bands).copy()
    except pyvips.Error as exc:
        raise OSError(f"the JPEG does not decode: {exc.message.strip()}") from None

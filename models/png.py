"""PNG a band of rows at a time: a picture's PNG written, and a job's photo read back,
without a whole copy of it.

Why not Pillow's encoder: it compresses a whole ``Image`` only, and an RGB ``Image`` holds
4 bytes a pixel, so an 8192 x 8192 print encoded through it held a 268 MB copy beside
its 201 MB canvas (``benchmarks/print_memory.py``). libvips streams, but its PNG writer
stores text as Latin-1 ``tEXt`` (a prompt's UTF-8 comes back garbled) and adds a
``pHYs`` chunk.

Reading: Pillow decodes a PNG whole into an image of its own (4 bytes a pixel: 268 MB for
an 8192 px photo). :func:`png_bands` inflates the pixel stream itself and hands Pillow one
band of rows at a time, as a PNG of its own that starts with the row above the band
(:func:`unfiltered`): Pillow's decoder undoes every filter, exactly, and never holds more
than a band. Any 8-bit RGB PNG without interlace is read so (a job's payload, a print's
result); another colour type or an interlaced one is :class:`NotBanded`: Pillow reads it
whole. An earlier reader undid None, Sub and Up itself in numpy and payloads were written
with those three filters only (Average and Paeth need each byte's left neighbour first, a
loop per byte in numpy); the five filters make smaller payloads.

The file: the signature; ``IHDR`` (8-bit truecolour, no interlace); one ``iTXt`` chunk
per text entry (UTF-8, uncompressed: what Pillow's ``PngInfo.add_itxt`` writes); the
pixels as one zlib stream cut into ``IDAT`` chunks as it is produced; ``IEND``. Each
row carries the filter of the five (None, Sub, Up, Average, Paeth; PNG spec, section 9)
whose output has the smallest sum of absolute values read as signed bytes, the
heuristic the PNG spec recommends and libpng and Pillow use: on the sample paintings
enlarged to 4096 px the files are within 0.1 % of Pillow's, written in 0.84x-1.03x its
time (``benchmarks/png_encode.py --side 4096``, one run). With ``x`` the byte, ``a`` the one a pixel to its left,
``b`` above and ``c`` above-left (0 off the picture), the filters send ``x``,
``x - a``, ``x - b``, ``x - floor((a + b) / 2)`` and ``x - P(a, b, c)`` modulo 256, with
``P`` the Paeth predictor: whichever of ``a, b, c`` is nearest ``a + b - c``, ties in that
order.

Memory: a band of ``ROWS_PER_BAND`` rows in a few uint8 and int16 copies, and the
compressed bytes. Bands of 16 rows instead of 64: at 8192 px the encode's peak RSS
growth (its output included) is 61-107 MB against 73-165 MB over the six pictures of
``benchmarks/png_encode.py --side 8192 --repeats 1``, in 0.90x-0.99x the time (one run).
A PNG past ``SPOOL_BYTES`` (8 MB) is written on to a file in the temporary folder and read
back in one piece of its size: in the server (one malloc arena, no ``mmap`` for big
blocks: ``atelier serve``'s tuning), a buffer that grows while other threads allocate is
moved and copied as it grows, so an 8192 px print's encode took about twice its PNG
(``benchmarks/print_memory.py --side 8192``: the encode stage 269-291 MB before, 181-201
MB after, in runs that also had the print's other changes of the same session).
"""

from __future__ import annotations

import errno
import io
import struct
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from typing import IO

import numpy as np
import torch
from PIL import Image

from models.disk_picture import Picture, ScratchFull, picture_rows

SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: Rows filtered and compressed at once.
ROWS_PER_BAND = 16
#: Bytes of a PNG written in memory; a bigger one goes on to a file in the temporary
#: folder and is read back in one piece of its size (see the module's text).
SPOOL_BYTES = 8 * 2**20
#: Bytes per pixel (8-bit RGB): how far to the left ``a`` lies.
PIXEL_BYTES = 3


def encode_png(
    image: Picture,
    text: Mapping[str, str] | None = None,
    *,
    level: int = 6,
) -> bytes:
    """``image`` as PNG bytes, with ``text`` in ``iTXt`` chunks and zlib's ``level``, each
    row's filter the best of the five.

    Shape:
        - image: ``(3, H, W)``, uint8 or float in [0, 1] (clamped and rounded to 8 bits),
          any strides, on any device, or on disk (read a band at a time).
    """
    if len(image.shape) != 3 or image.shape[0] != 3:
        raise ValueError(f"expected a (3, H, W) tensor, got {tuple(image.shape)}")
    height, width = image.shape[-2:]
    if height < 1 or width < 1:
        raise ValueError(f"a PNG needs at least one pixel, got {height} x {width}")
    with tempfile.SpooledTemporaryFile(SPOOL_BYTES, prefix="atelier-png-") as out:
        try:
            _write_png(out, image, text or {}, level)
        except OSError as error:
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise ScratchFull(
                error.errno, f"no room for a PNG in {tempfile.gettempdir()}"
            ) from None
        out.seek(0)
        return out.read()


def _write_png(out: IO[bytes], image: Picture, text: Mapping[str, str], level: int) -> None:
    height, width = image.shape[-2:]
    out.write(SIGNATURE)
    _chunk(out, b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    for key, value in text.items():
        _chunk(out, b"iTXt", key.encode("latin-1") + b"\0\0\0\0\0" + value.encode("utf-8"))
    compressor = zlib.compressobj(level)
    above = np.zeros(width * PIXEL_BYTES, dtype=np.uint8)
    for top in range(0, height, ROWS_PER_BAND):
        band = _rows(image, top, min(top + ROWS_PER_BAND, height))
        data = compressor.compress(filtered(band, above).data)
        if data:
            _chunk(out, b"IDAT", data)
        above = band[-1]
    _chunk(out, b"IDAT", compressor.flush())
    _chunk(out, b"IEND", b"")


def filtered(band: np.ndarray, above: np.ndarray) -> np.ndarray:
    """Each row of ``band`` with its filter type byte first and its bytes filtered by the
    filter of least absolute sum (see the module's text).

    Shape:
        - band: ``(n, W * 3)`` uint8; above: ``(W * 3,)`` uint8, the row above the band
          (zeros above the first); output: ``(n, 1 + W * 3)`` uint8.
    """
    x = band
    b = np.concatenate([above[None], x[:-1]])
    a = np.zeros_like(x)
    a[:, PIXEL_BYTES:] = x[:, :-PIXEL_BYTES]
    c = np.zeros_like(x)
    c[:, PIXEL_BYTES:] = b[:, :-PIXEL_BYTES]
    wide_a, wide_b, wide_c = (v.astype(np.int16) for v in (a, b, c))
    # distances of a + b - c to a, b and c
    to_a, to_b = np.abs(wide_b - wide_c), np.abs(wide_a - wide_c)
    to_c = np.abs(wide_a + wide_b - 2 * wide_c)
    paeth = np.where((to_a <= to_b) & (to_a <= to_c), a, np.where(to_b <= to_c, b, c))
    average = (a & b) + ((a ^ b) >> 1)  # floor((a + b) / 2) without leaving 8 bits
    # uint8 arithmetic wraps: each difference is already modulo 256
    candidates = (x, x - a, x - b, x - average, x - paeth)
    # |byte as signed| = min(u, 256 - u)
    cost = np.stack([np.minimum(f, np.negative(f)).sum(axis=1, dtype=np.int64) for f in candidates])
    chosen = cost.argmin(axis=0)
    out = np.empty((x.shape[0], x.shape[1] + 1), dtype=np.uint8)
    out[:, 0] = chosen
    for kind, candidate in enumerate(candidates):
        rows = chosen == kind
        out[rows, 1:] = candidate[rows]
    return out


def _rows(image: Picture, top: int, bottom: int) -> np.ndarray:
    """Rows ``top:bottom`` of ``(3, H, W)`` as ``(n, W * 3)`` uint8 RGB bytes."""
    rows = picture_rows(image, top, bottom).detach().cpu()
    if rows.dtype != torch.uint8:
        rows = rows.float().clamp(0, 1).mul_(255.0).round_().to(torch.uint8)
    return rows.permute(1, 2, 0).reshape(bottom - top, -1).numpy()


def _chunk(out: IO[bytes], kind: bytes, data: bytes) -> None:
    """One chunk: its length, type, data and the CRC-32 of type and data."""
    out.write(struct.pack(">I", len(data)))
    out.write(kind)
    out.write(data)
    out.write(struct.pack(">I", zlib.crc32(data, zlib.crc32(kind))))


class NotBanded(ValueError):
    """A PNG that :func:`png_bands` does not read: not 8-bit RGB, or interlaced (Pillow
    reads it whole)."""


def png_size(data: bytes) -> tuple[int, int]:
    """``(height, width)`` from a PNG's header.

    Raises:
        ValueError: not a PNG.
    """
    if data[:8] != SIGNATURE or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    return height, width


def png_bands(data: bytes, rows_per_band: int = ROWS_PER_BAND) -> Iterator[tuple[int, np.ndarray]]:
    """The pixels of an 8-bit RGB PNG without interlace (a job's payload, a print's
    result: :func:`encode_png`'s), a band at a time, top to bottom: ``(top, (n, W, 3)
    uint8)``. Each chunk's CRC is checked, as Pillow checks it.

    Raises:
        NotBanded: another colour type or depth, or interlaced (found at the header).
        ValueError: a corrupt PNG (a bad CRC, a broken zlib stream, a row's filter byte
            none of PNG's, rows missing).
    """
    height, width = png_size(data)
    if data[24:29] != bytes([8, 2, 0, 0, 0]):  # depth, colour type, compression, filter, lace
        raise NotBanded("not an 8-bit RGB PNG without interlace")
    stride = 1 + width * PIXEL_BYTES
    inflate = zlib.decompressobj()
    pending = bytearray()
    above = np.zeros(width * PIXEL_BYTES, dtype=np.uint8)
    top = 0
    for kind, body in _chunks(data):
        if kind == b"IEND":
            break
        if kind != b"IDAT":
            continue
        try:
            pending += inflate.decompress(body)
        except zlib.error as exc:
            raise ValueError(f"a broken zlib stream: {exc}") from None
        while len(pending) >= stride * min(rows_per_band, height - top) and top < height:
            rows = min(rows_per_band, height - top)
            band = np.frombuffer(bytes(pending[: rows * stride]), dtype=np.uint8)
            del pending[: rows * stride]
            pixels = unfiltered(band.reshape(rows, stride), above)
            above = pixels[-1]
            yield top, pixels.reshape(rows, width, PIXEL_BYTES)
            top += rows
    if top < height:
        raise ValueError(f"a truncated PNG: {top} of {height} rows")


def unfiltered(band: np.ndarray, above: np.ndarray) -> np.ndarray:
    """:func:`filtered`'s rows undone, whatever filter each uses, by Pillow's PNG decoder:
    the rows are decoded as a PNG of their own whose first row is ``above`` as it is
    (filter None), so each filter sees the row above it that it saw in the whole picture.
    The extra row is dropped.

    Shape:
        - band: ``(n, 1 + W * 3)`` uint8; above: ``(W * 3,)``, the row above the band
          (zeros above the first); output: ``(n, W * 3)`` uint8.

    Raises:
        ValueError: a row's filter byte is none of PNG's five.
    """
    rows, stride = band.shape
    raw = np.empty((rows + 1, stride), dtype=np.uint8)
    raw[0, 0], raw[0, 1:], raw[1:] = 0, above, band
    out = io.BytesIO()
    out.write(SIGNATURE)
    header = struct.pack(">IIBBBBB", (stride - 1) // PIXEL_BYTES, rows + 1, 8, 2, 0, 0, 0)
    _chunk(out, b"IHDR", header)
    _chunk(out, b"IDAT", zlib.compress(raw.data, 0))  # stored: the rows as they are
    _chunk(out, b"IEND", b"")
    try:
        with Image.open(out, formats=["PNG"]) as image:
            pixels = np.array(image)  # writable (a band: a small copy)
    except (OSError, SyntaxError) as exc:
        raise ValueError(f"a corrupt PNG row: {exc}") from None
    return pixels[1:].reshape(rows, stride - 1)


def _chunks(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """``(type, data)`` of each chunk after the signature, its CRC checked."""
    offset = len(SIGNATURE)
    while offset + 12 <= len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length] or b"\0" * 4)
        if len(body) != length or zlib.crc32(body, zlib.crc32(kind)) != crc:
            raise ValueError(f"a corrupt PNG: the {kind!r} chunk's CRC does not match")
        yield kind, body
        offset += 12 + length

"""The band-by-band PNG encoder, read back by Pillow's decoder (an independent one)."""

from __future__ import annotations

import errno
import io
import os
import struct
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import models.png as png_module
from models.disk_picture import ScratchFull
from models.images import encode_image, to_uint8
from models.png import (
    NotBanded,
    _chunks,
    encode_png,
    filtered,
    png_bands,
    png_size,
)


def _decoded(data: bytes) -> tuple[np.ndarray, dict[str, str]]:
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG" and image.mode == "RGB"
        return np.asarray(image).copy(), dict(image.text)


def _smooth(height: int, width: int, seed: int) -> torch.Tensor:
    """A smooth random picture (a few noise pixels enlarged), ``(3, H, W)`` uint8."""
    rng = np.random.default_rng(seed)
    small = Image.fromarray(rng.integers(0, 256, (4, 5, 3), np.uint8))
    picture = np.asarray(small.resize((width, height), Image.Resampling.BICUBIC))
    return torch.from_numpy(picture.copy()).permute(2, 0, 1).contiguous()


def _averaged(height: int, width: int, seed: int) -> torch.Tensor:
    """Each byte the floor of the mean of the byte a pixel to its left and the one above
    (0 off the picture), under a random first row: the Average filter sends zeros."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((height, width * 3), dtype=np.int64)
    rows[0] = rng.integers(0, 256, width * 3)
    for i in range(1, height):
        for k in range(width * 3):
            left = rows[i, k - 3] if k >= 3 else 0
            rows[i, k] = (left + rows[i - 1, k]) // 2
    return torch.from_numpy(rows.astype(np.uint8).reshape(height, width, 3)).permute(2, 0, 1)


def _bands(data: bytes, rows_per_band: int) -> np.ndarray:
    tops, bands = zip(*png_bands(data, rows_per_band), strict=True)
    assert list(tops) == list(range(0, sum(len(band) for band in bands), rows_per_band))
    return np.concatenate(bands)


@settings(max_examples=40, deadline=None)
@given(
    height=st.integers(1, 140),
    width=st.integers(1, 40),
    seed=st.integers(0, 2**16),
    smooth=st.booleans(),
    rows_per_band=st.integers(1, 70),
)
def test_any_picture_decodes_to_itself(height, width, seed, smooth, rows_per_band):
    """Noise and smooth pictures, one pixel to several bands of rows (64 each), read by
    Pillow, and read back in bands of any height too (the last one short; text before the
    pixels)."""
    if smooth:
        image = _smooth(height, width, seed)
    else:
        generator = torch.Generator().manual_seed(seed)
        image = torch.randint(0, 256, (3, height, width), generator=generator, dtype=torch.uint8)
    expected = image.permute(1, 2, 0).numpy()
    pixels, text = _decoded(encode_png(image))
    np.testing.assert_array_equal(pixels, expected)
    assert text == {}
    with_text = encode_png(image, {"k": "v"}, level=1)
    np.testing.assert_array_equal(_bands(with_text, rows_per_band), expected)


def test_every_filter_is_chosen_and_undone(monkeypatch):
    """Pictures where each of the five filters wins on some row; the decoder undoes each.
    Small bands, so that rows above a band come from the band before."""
    monkeypatch.setattr(png_module, "ROWS_PER_BAND", 5)
    ramp = torch.arange(40, dtype=torch.uint8).repeat(3, 12, 1)  # rows alike: Sub, then Up
    pictures = [torch.zeros(3, 6, 9, dtype=torch.uint8), ramp, _averaged(12, 10, seed=1)]
    pictures += [_smooth(48, 64, seed) for seed in range(4)]
    chosen: set[int] = set()
    for image in pictures:
        rows = image.permute(1, 2, 0).reshape(image.shape[1], -1).numpy()
        chosen |= set(filtered(rows, np.zeros(rows.shape[1], np.uint8))[:, 0].tolist())
        pixels, _ = _decoded(encode_png(image))
        np.testing.assert_array_equal(pixels, image.permute(1, 2, 0).numpy())
    assert chosen == {0, 1, 2, 3, 4}


def test_a_float_picture_is_rounded_as_to_uint8_rounds_it_and_views_are_read():
    generator = torch.Generator().manual_seed(3)
    image = torch.rand(3, 70, 21, generator=generator) * 1.2 - 0.1  # some outside [0, 1]
    pixels, _ = _decoded(encode_png(image))
    np.testing.assert_array_equal(pixels, to_uint8(image.clone()).permute(1, 2, 0).numpy())
    stored = torch.randint(0, 256, (70, 21, 3), generator=generator, dtype=torch.uint8)
    pixels, _ = _decoded(encode_png(stored.permute(2, 0, 1)))  # a channels-last view
    np.testing.assert_array_equal(pixels, stored.numpy())


def test_text_comes_back_as_written_in_utf8():
    text = {"prompt": "a cat 🐱 in a café", "steps": "30", "empty": ""}
    _, read = _decoded(encode_png(torch.zeros(3, 2, 2, dtype=torch.uint8), text))
    assert read == text


def test_encode_image_writes_how_the_image_was_made_and_the_pixels():
    image = _smooth(33, 17, seed=9)
    data, media_type = encode_image(image, "png", {"prompt": "ünïcode ✓", "seed": 7, "x": None})
    pixels, text = _decoded(data)
    assert media_type == "image/png"
    assert text == {"prompt": "ünïcode ✓", "seed": "7"}
    np.testing.assert_array_equal(pixels, image.permute(1, 2, 0).numpy())


def test_a_png_past_the_spool_size_is_written_through_a_file_and_is_the_same_bytes(
    monkeypatch, tmp_path
):
    """A PNG bigger than ``SPOOL_BYTES`` goes on to a file in the temporary folder and is
    read back: the same bytes as one written in memory, and the file is gone after."""
    pixels = torch.randint(0, 256, (3, 120, 90), dtype=torch.uint8)
    in_memory = encode_png(pixels, {"prompt": "ünïcode"})
    monkeypatch.setattr(png_module, "SPOOL_BYTES", 1024)
    monkeypatch.setattr(png_module.tempfile, "tempdir", str(tmp_path))
    rolled = []
    spooled = png_module.tempfile.SpooledTemporaryFile

    class Watched(spooled):  # type: ignore[misc, valid-type]
        def rollover(self) -> None:
            rolled.append(True)
            super().rollover()

    monkeypatch.setattr(png_module.tempfile, "SpooledTemporaryFile", Watched)
    assert len(in_memory) > 1024
    assert encode_png(pixels, {"prompt": "ünïcode"}) == in_memory
    assert rolled and not list(tmp_path.iterdir())


def test_no_room_for_a_big_png_is_scratch_full_and_other_errors_stay_themselves(monkeypatch):
    """A full temporary folder while a big PNG is written is ``ScratchFull`` (its job
    fails once with ``storage_full``); another write error is raised as it is."""
    pixels = torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8)

    def failing(code):
        class Failing(io.BytesIO):
            def __init__(self, *args, **kwargs):
                super().__init__()

            def write(self, data):
                if self.tell() + len(data) > 4096:
                    raise OSError(code, os.strerror(code))
                return super().write(data)

        return Failing

    monkeypatch.setattr(png_module.tempfile, "SpooledTemporaryFile", failing(errno.ENOSPC))
    with pytest.raises(ScratchFull, match="no room for a PNG"):
        encode_png(pixels)
    monkeypatch.setattr(png_module.tempfile, "SpooledTemporaryFile", failing(errno.EIO))
    with pytest.raises(OSError) as raised:
        encode_png(pixels)
    assert raised.type is OSError and raised.value.errno == errno.EIO


@pytest.mark.parametrize("shape", [(4, 4), (1, 3, 4, 4), (3, 0, 5)])
def test_a_picture_of_another_shape_is_refused(shape):
    with pytest.raises(ValueError, match=r"\(3, H, W\)|at least one pixel"):
        encode_png(torch.zeros(shape, dtype=torch.uint8))


# ------------------------------------------------------------ reading a band at a time
@pytest.mark.parametrize("rows_per_band", [1, 5, 64])
def test_every_filter_is_undone_a_band_at_a_time(rows_per_band):
    """Rows where each of the five filters wins (as in the test above), read back in bands
    of one row, of a few and of more than the picture: the row above each band comes
    from the band before."""
    ramp = torch.arange(40, dtype=torch.uint8).repeat(3, 12, 1)
    pictures = [torch.zeros(3, 6, 9, dtype=torch.uint8), ramp, _averaged(12, 10, seed=1)]
    pictures += [_smooth(48, 64, seed) for seed in range(4)]
    chosen: set[int] = set()
    for image in pictures:
        expected = image.permute(1, 2, 0).numpy()
        rows = expected.reshape(image.shape[1], -1)
        chosen |= set(filtered(rows, np.zeros(rows.shape[1], np.uint8))[:, 0].tolist())
        np.testing.assert_array_equal(_bands(encode_png(image), rows_per_band), expected)
    assert chosen == {0, 1, 2, 3, 4}


def test_other_pngs_are_not_banded_and_corrupt_ones_are_errors():
    buffer = io.BytesIO()
    Image.new("RGBA", (4, 4)).save(buffer, "PNG")
    with pytest.raises(NotBanded, match="8-bit RGB"):
        list(png_bands(buffer.getvalue()))
    data = encode_png(_smooth(30, 20, seed=2), level=1)
    flipped = bytearray(data)
    flipped[-30] ^= 0xFF  # a byte of the last IDAT chunk's data
    with pytest.raises(ValueError, match="CRC"):
        list(png_bands(bytes(flipped)))
    # the same file with its last 50 bytes of filtered rows missing (one IDAT chunk)
    first = data.index(b"IDAT") - 4
    stream = zlib.decompressobj()
    rows = b"".join(stream.decompress(body) for kind, body in _chunks(data) if kind == b"IDAT")
    short = zlib.compress(rows[:-50], 1)
    chunk = struct.pack(">I", len(short)) + b"IDAT" + short
    chunk += struct.pack(">I", zlib.crc32(short, zlib.crc32(b"IDAT")))
    end = data.index(b"IEND") - 4
    with pytest.raises(ValueError, match="truncated"):
        list(png_bands(data[:first] + chunk + data[end:], 7))
    # a row whose filter byte is none of PNG's five
    unknown = bytearray(rows)
    unknown[3 * (1 + 20 * 3)] = 9
    packed = zlib.compress(bytes(unknown), 1)
    chunk = struct.pack(">I", len(packed)) + b"IDAT" + packed
    chunk += struct.pack(">I", zlib.crc32(packed, zlib.crc32(b"IDAT")))
    with pytest.raises(ValueError, match="corrupt PNG row"):
        list(png_bands(data[:first] + chunk + data[end:], 7))
    with pytest.raises(ValueError, match="not a PNG"):
        png_size(b"GIF89a" + bytes(30))

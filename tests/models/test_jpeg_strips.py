"""A JPEG kept on disk is decoded a strip at a time (``models.jpeg_strips`` through
``Decode.pixels``) to the pixels the whole decode gives: each EXIF orientation, greyscale
and RGB, every direct JPEG scale, an ICC profile; a photo that needs a resize after the
scale is decoded whole (Pillow's resampler); a corrupt file fails as the whole decode
does."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from models.disk_picture import DiskPicture
from models.images import Decode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
from icc import SWAPPED_PROFILE  # noqa: E402

ON_DISK_ABOVE = 16


def _photo(width: int, height: int, mode: str = "RGB", seed: int = 0) -> Image.Image:
    """Smooth gradients with some noise: a photo's kind of content, not a flat one."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    channels = [(np.sin(x / (7 + 5 * c)) + np.cos(y / (11 + 3 * c))) * 60 + 128 for c in range(3)]
    pixels = np.stack(channels, axis=2) + rng.normal(0, 12, (height, width, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    return image if mode == "RGB" else image.convert(mode)


def _jpeg(image: Image.Image, orientation: int = 1, **save: object) -> bytes:
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90, exif=exif, **save)
    return buffer.getvalue()


def _both(data: bytes, target: tuple[int, int] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(in strips, whole)``: the same plan, on disk and in memory."""

    def decoded(on_disk: bool) -> torch.Tensor:
        plan = Decode.plan(Image.open(io.BytesIO(data)), lambda shown: target, "photo", data)
        if not on_disk:
            return plan.pixels()
        picture = plan.pixels(on_disk_above=ON_DISK_ABOVE)
        assert isinstance(picture, DiskPicture)
        return picture.read()

    return decoded(True), decoded(False)


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_strips_are_the_whole_decode_in_every_orientation(orientation, mode):
    data = _jpeg(_photo(150, 70, mode, seed=orientation), orientation)
    strips, whole = _both(data, None)
    assert strips.shape == whole.shape == ((3, 150, 70) if orientation >= 5 else (3, 70, 150))
    assert torch.equal(strips, whole)


@pytest.mark.parametrize("scale", [2, 4, 8])
@pytest.mark.parametrize("orientation", [1, 6])
def test_strips_at_a_direct_jpeg_scale_are_the_whole_decode(scale, orientation):
    data = _jpeg(_photo(401, 243, seed=scale), orientation)  # sides no scale divides
    shown = (243, 401) if orientation >= 5 else (401, 243)
    target = (-(-shown[0] // scale), -(-shown[1] // scale))
    strips, whole = _both(data, target)
    assert strips.shape == whole.shape == (3, target[1], target[0])
    assert torch.equal(strips, whole)


def test_a_resize_left_after_the_scale_is_pillows_whole_decode():
    """libvips' resamplers are not Pillow's: a photo that needs one is decoded whole."""
    data = _jpeg(_photo(400, 240, seed=5))
    plan = Decode.plan(Image.open(io.BytesIO(data)), lambda shown: (150, 90), "photo", data)
    assert plan.scale == 2 and plan.image.size == (200, 120)  # then 3/4 by Pillow
    assert not plan._decodes_in_strips(ON_DISK_ABOVE)
    strips, whole = _both(data, (150, 90))
    assert strips.shape == (3, 90, 150) and torch.equal(strips, whole)


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_an_embedded_profile_is_converted_to_srgb_in_every_strip(mode):
    red = Image.new("RGB", (120, 200), (230, 20, 20)).convert(mode)
    data = _jpeg(red, 6, icc_profile=SWAPPED_PROFILE)
    strips, whole = _both(data, None)
    assert torch.equal(strips, whole)
    if mode == "RGB":  # the profile swaps red and blue: shown blue
        assert float(strips[2].float().mean()) > 200 and float(strips[0].float().mean()) < 60


def test_a_profile_that_does_not_fit_is_ignored_as_in_the_whole_decode():
    data = _jpeg(_photo(90, 60), icc_profile=b"not a profile" * 10)
    strips, whole = _both(data, None)
    assert torch.equal(strips, whole)


def test_a_truncated_jpeg_fails_as_the_whole_decode_does():
    data = _jpeg(_photo(300, 200, seed=2))
    cut = data[: len(data) // 2]
    plan = Decode.plan(Image.open(io.BytesIO(cut)), lambda shown: None, "photo", cut)
    with pytest.raises(OSError):
        plan.pixels(on_disk_above=ON_DISK_ABOVE)
    whole = Decode.plan(Image.open(io.BytesIO(cut)), lambda shown: None, "photo", cut)
    with pytest.raises(OSError):
        whole.pixels()


def test_a_small_result_and_other_formats_are_decoded_whole():
    """Strips only where the result goes to disk, and for a JPEG: the rest as before."""
    data = _jpeg(_photo(40, 30))
    plan = Decode.plan(Image.open(io.BytesIO(data)), lambda shown: None, "photo", data)
    assert isinstance(plan.pixels(on_disk_above=40), torch.Tensor)
    png = io.BytesIO()
    _photo(40, 30).save(png, "PNG")
    png_plan = Decode.plan(Image.open(png), lambda shown: None, "photo", png.getvalue())
    assert isinstance(png_plan.pixels(on_disk_above=ON_DISK_ABOVE), DiskPicture)

"""The image codec ``models.images``: pixels, masks, encoding with parameters, files."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from models.disk_picture import DiskPicture
from models.images import (
    _rgb8_array,
    encode_image,
    fit_longer_side,
    from_png,
    load_image,
    mask_from_rgb,
    picture_from_png,
    pil_to_picture,
    pil_to_tensor,
    pil_to_uint8,
    png_thumbnail,
    resize_to,
    save_image,
    tensor_to_pil,
    thumbnail_size,
    to_float,
    to_png,
    to_uint8,
)
from models.png import NotBanded, encode_png


def _levels(*shape, seed=0):
    """8-bit levels as floats: exact through any lossless 8-bit codec."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, generator=generator).float() / 255.0


def test_png_round_trips_exactly_and_carries_the_parameters():
    image = _levels(3, 17, 23)
    parameters = {"prompt": "un cercle rouge \u2192 gauche", "steps": 4, "seeds": [1, 2], "x": None}
    data, media_type = encode_image(image, "png", parameters)
    assert media_type == "image/png"
    with Image.open(io.BytesIO(data)) as decoded:
        torch.testing.assert_close(pil_to_tensor(decoded), image, atol=1e-7, rtol=0)
        text = dict(decoded.text)
    assert text == {"prompt": parameters["prompt"], "steps": "4", "seeds": json.dumps([1, 2])}


@pytest.mark.parametrize(("fmt", "media_type"), [("jpeg", "image/jpeg"), ("webp", "image/webp")])
def test_lossy_encodings_decode_close_to_the_input(fmt, media_type):
    image = torch.linspace(0, 1, 32 * 32).reshape(1, 32, 32).repeat(3, 1, 1)
    data, got_type = encode_image(image, fmt, {"alpha": 0.5})
    assert got_type == media_type
    with Image.open(io.BytesIO(data)) as decoded:
        assert decoded.format == fmt.upper()
        assert (pil_to_tensor(decoded) - image).abs().mean() < 0.02


def _image_of_mode(mode: str, seed: int) -> Image.Image:
    """A random 9 x 7 image in ``mode``; the palette one has a transparent index."""
    rng = np.random.default_rng(seed)
    rgba = Image.fromarray(rng.integers(0, 256, (7, 9, 4), dtype=np.uint8), "RGBA")
    if mode == "I;16":
        return Image.fromarray(rng.integers(0, 65536, (7, 9), dtype=np.uint16))  # I;16
    if mode == "I":
        return Image.fromarray(rng.integers(0, 70000, (7, 9), dtype=np.int32), "I")
    if mode == "F":
        return Image.fromarray(rng.uniform(0, 255, (7, 9)).astype(np.float32), "F")
    if mode == "P":
        image = rgba.convert("RGB").convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
        image.info["transparency"] = 3
        return image
    return rgba.convert(mode)


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "LA", "L", "P", "CMYK", "I;16", "I", "F"])
def test_eight_bit_pixels_are_the_rounded_float_pixels(mode):
    """``pil_to_uint8`` takes no float detour for 8-bit modes, yet gives the same values."""
    image = _image_of_mode(mode, seed=len(mode))
    out = pil_to_uint8(image)
    assert out.dtype == torch.uint8 and out.shape == (3, 7, 9)
    assert torch.equal(out, to_uint8(pil_to_tensor(image)))


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "LA", "L", "P", "CMYK", "I;16", "F"])
def test_a_picture_above_the_side_is_kept_on_disk_with_the_same_pixels(mode):
    """``pil_to_picture``: at or below ``on_disk_above`` the tensor ``pil_to_uint8`` gives;
    above it a DiskPicture of the same pixels (written in strips: their equality with the
    whole is the test below)."""
    image = _image_of_mode(mode, seed=len(mode) + 2)
    expected = pil_to_uint8(image)
    in_memory = pil_to_picture(image, on_disk_above=9)
    assert isinstance(in_memory, torch.Tensor) and torch.equal(in_memory, expected)
    on_disk = pil_to_picture(image, on_disk_above=8)
    assert isinstance(on_disk, DiskPicture) and on_disk.shape == (3, 7, 9)
    assert torch.equal(on_disk.read(), expected)


@pytest.mark.parametrize("writer", ["to_png", "pillow"])
def test_a_payloads_png_is_kept_on_disk_above_the_side_with_the_same_pixels(writer):
    """``picture_from_png``: a tensor at or below ``on_disk_above``; above it a DiskPicture,
    read a band at a time from ``to_png``'s bytes (here from a disk picture) and whole
    from a PNG Pillow wrote (a payload stored before the band filters)."""
    pixels = torch.randint(0, 256, (3, 70, 45), dtype=torch.uint8)
    on_disk = DiskPicture((3, 70, 45), torch.uint8)
    on_disk.write(0, 0, pixels)
    if writer == "to_png":
        data = to_png(on_disk)
    else:
        buffer = io.BytesIO()
        Image.fromarray(pixels.permute(1, 2, 0).numpy()).save(buffer, "PNG")
        data = buffer.getvalue()
    small = picture_from_png(data, on_disk_above=70)
    assert isinstance(small, torch.Tensor) and torch.equal(small, pixels)
    kept = picture_from_png(data, on_disk_above=69)
    assert isinstance(kept, DiskPicture) and torch.equal(kept.read(), pixels)


@pytest.mark.parametrize("mode", ["I;16", "I", "F"])
def test_wide_grey_pixels_converted_in_strips_are_the_rounded_whole_floats(mode):
    """A 16-bit, 32-bit integer or float image in strips of rows (the last one short):
    the pixels its whole float conversion rounds to, the peak read from the whole."""
    images = [_image_of_mode(mode, seed=len(mode) + 3)]
    if mode == "I":  # 8-bit values but for one pixel of the last row: read as 16-bit
        values = np.random.default_rng(4).integers(0, 256, (7, 9), dtype=np.int32)
        values[-1, -1] = 40_000
        images.append(Image.fromarray(values, "I"))
    for image in images:
        whole = to_uint8(pil_to_tensor(image)).permute(1, 2, 0).numpy()
        for rows in (1, 2, 3, image.height):
            assert np.array_equal(_rgb8_array(image, rows_per_strip=rows), whole)


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "LA", "L", "P", "CMYK"])
def test_eight_bit_pixels_converted_in_strips_are_the_whole_images(mode):
    """Strips of rows (the last one short) give the pixels one whole conversion gives."""
    image = _image_of_mode(mode, seed=len(mode) + 1)
    white = Image.new("RGBA", image.size, (255, 255, 255, 255))
    whole = np.array(Image.alpha_composite(white, image.convert("RGBA")).convert("RGB"))
    for rows in (1, 2, 3, image.height):
        assert np.array_equal(_rgb8_array(image, rows_per_strip=rows), whole)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_a_tensor_copied_into_pillow_in_strips_is_the_whole_array(dtype):
    """Strips of rows (the last one short) make the image the whole ``(H, W, 3)`` array
    makes, 8-bit as it is, floats clamped and rounded."""
    levels = _levels(3, 11, 6, seed=3)
    image = (levels * 255).round().to(torch.uint8) if dtype == torch.uint8 else levels * 1.2 - 0.1
    if dtype == torch.float32:
        image_8bit = (image.clamp(0, 1) * 255.0).round().to(torch.uint8)
    else:
        image_8bit = image
    whole = image_8bit.permute(1, 2, 0).numpy()
    for rows in (1, 4, 11):
        assert np.array_equal(np.asarray(tensor_to_pil(image, rows_per_strip=rows)), whole)


def test_a_pillow_image_encodes_as_its_tensor_does():
    image = (_levels(3, 9, 13, seed=4) * 255).round().to(torch.uint8)
    for fmt in ("png", "jpeg"):
        assert encode_image(tensor_to_pil(image), fmt, {"a": 1}) == encode_image(
            image, fmt, {"a": 1}
        )
    with pytest.raises(ValueError, match="unknown format"):
        encode_image(tensor_to_pil(image), "gif")


def test_encode_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown format"):
        encode_image(torch.rand(3, 4, 4), "gif")
    with pytest.raises(ValueError, match=r"\(3, H, W\)"):
        encode_image(torch.rand(4, 4), "png")


def test_a_saved_file_is_the_encoded_bytes_and_loads_back(tmp_path):
    image = _levels(1, 3, 12, 10, seed=1)
    path = save_image(image, tmp_path / "out.png", {"alpha": 0.5})
    assert path.read_bytes() == encode_image(image[0], "png", {"alpha": 0.5})[0]
    torch.testing.assert_close(load_image(path), image, atol=1e-7, rtol=0)
    assert Image.open(save_image(image, tmp_path / "out.JPG")).format == "JPEG"
    with pytest.raises(ValueError, match="unknown image suffix"):
        save_image(image, tmp_path / "out.tiff")
    with pytest.raises(ValueError, match="one image"):
        save_image(torch.rand(2, 3, 4, 4), tmp_path / "two.png")


def test_transparency_is_composited_over_white_in_files_too(tmp_path):
    rgba = np.zeros((4, 6, 4), dtype=np.uint8)
    rgba[..., 0] = 200
    rgba[:, :3, 3] = 255  # left half opaque red, right half transparent
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    got = load_image(tmp_path / "a.png")[0]
    torch.testing.assert_close(
        got[:, :, :3], torch.tensor([200 / 255, 0, 0])[:, None, None].expand(3, 4, 3)
    )
    torch.testing.assert_close(got[:, :, 3:], torch.ones(3, 4, 3))


def test_a_mask_is_the_channel_mean_however_it_is_read(tmp_path):
    image = _levels(3, 5, 7, seed=2)
    torch.testing.assert_close(mask_from_rgb(image), image.mean(0, keepdim=True))
    save_image(image, tmp_path / "m.png")
    torch.testing.assert_close(
        mask_from_rgb(load_image(tmp_path / "m.png")[0]),
        image.mean(0, keepdim=True),
        atol=1e-7,
        rtol=0,
    )


@settings(max_examples=60, deadline=None)
@given(
    height=st.integers(1, 300),
    width=st.integers(1, 300),
    size=st.integers(1, 256),
)
def test_fit_longer_side_bounds_the_longer_side_and_keeps_the_aspect(height, width, size):
    w, h = fit_longer_side(width, height, size)
    if max(height, width) <= size:
        assert (w, h) == (width, height)  # never enlarged
        return
    scale = size / max(height, width)  # both sides scaled alike, rounded
    if min(height, width) * scale < 1:  # raised so the shorter side keeps one pixel
        assert min(w, h) == 1
        scale = 1 / min(height, width)
    else:
        assert max(w, h) == size
    assert abs(h - height * scale) <= 0.5 or h == 1
    assert abs(w - width * scale) <= 0.5 or w == 1


def test_fit_longer_side_raises_the_shorter_side_to_min_side():
    assert fit_longer_side(400, 100, 32) == (32, 8)
    assert fit_longer_side(400, 100, 32, min_side=16) == (64, 16)  # past size, for min_side
    assert fit_longer_side(20, 10, 32, min_side=16) == (20, 10)  # never enlarged
    with pytest.raises(ValueError):
        fit_longer_side(4, 4, 0)


def test_resize_to_works_in_a_resizable_mode_of_the_image():
    palette = Image.new("P", (40, 20))
    assert resize_to(palette, (20, 10)).mode == "RGB"
    deep = Image.new("I;16B", (40, 20))
    assert resize_to(deep, (20, 10)).mode == "I"
    grey = Image.new("L", (40, 20), 7)
    assert resize_to(grey, (40, 20)) is grey  # the size already
    assert resize_to(grey, (80, 40)).size == (80, 40)  # an exact size may enlarge


def test_load_image_resizes_with_the_shared_resize(tmp_path):
    image = _levels(3, 50, 70, seed=3)
    save_image(image, tmp_path / "a.png")
    got = load_image(tmp_path / "a.png", max_side=20)
    assert got.shape == (1, 3, 14, 20)
    with Image.open(tmp_path / "a.png") as pil:
        expected = pil_to_tensor(resize_to(pil, fit_longer_side(70, 50, 20)))[None]
    assert torch.equal(got, expected)
    assert load_image(tmp_path / "a.png", size=(10, 12)).shape == (1, 3, 10, 12)


def test_eight_bit_pixels_round_trip_through_png_and_float():
    pixels = torch.randint(0, 256, (3, 9, 13), dtype=torch.uint8)
    assert torch.equal(from_png(to_png(pixels)), pixels)
    assert torch.equal(from_png(to_png(pixels.transpose(1, 2))), pixels.transpose(1, 2))
    floats = to_float(pixels.transpose(1, 2))
    assert floats.dtype == torch.float32 and floats.is_contiguous()
    assert torch.equal(to_uint8(floats.clone()), pixels.transpose(1, 2))
    torch.testing.assert_close(floats, pil_to_tensor(tensor_to_pil(pixels.transpose(1, 2))))


def test_load_image_converts_an_embedded_profile_to_srgb(tmp_path):
    """The CLI's reader applies the profile as the service's decoder does: a red pixel
    tagged with a profile whose red primary is sRGB's blue is read as blue."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
    from icc import SWAPPED_PROFILE

    from models.images import load_image

    path = tmp_path / "tagged.png"
    Image.new("RGB", (20, 10), (255, 0, 0)).save(path, icc_profile=SWAPPED_PROFILE)
    pixels = load_image(path)
    assert pixels.shape == (1, 3, 10, 20)
    assert float(pixels[0, 2].mean()) > 0.8 and float(pixels[0, 0].mean()) < 0.2


@settings(max_examples=300, deadline=None)
@given(width=st.integers(1, 3000), height=st.integers(1, 3000), side=st.integers(1, 600))
def test_thumbnail_size_is_pillows(width, height, side):
    image = Image.new("1", (width, height))
    image.thumbnail((side, side))
    assert thumbnail_size(width, height, side) == image.size


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(1, 1400),
    height=st.integers(1, 1400),
    side=st.integers(16, 200),
    seed=st.integers(0, 2**16),
)
def test_a_png_thumbnail_read_in_bands_is_pillows_thumbnail(width, height, side, seed):
    """Pillow's own thumbnail of the whole decode, pixel for pixel, wherever the band
    reader reduces (else it leaves the picture to the caller's whole decode)."""
    rng = np.random.default_rng(seed)
    smooth = Image.fromarray(rng.integers(0, 256, (5, 7, 3), np.uint8)).resize((width, height))
    pixels = np.asarray(smooth) ^ rng.integers(0, 32, (height, width, 3), dtype=np.uint8)
    data = encode_png(torch.from_numpy(pixels).permute(2, 0, 1))
    with Image.open(io.BytesIO(data)) as whole:
        whole.thumbnail((side, side), Image.Resampling.LANCZOS)
        expected = np.asarray(whole)
    made = png_thumbnail(data, side)
    reduces = max(width / expected.shape[1], height / expected.shape[0]) >= 4
    assert (made is not None) == (reduces and (width, height) != whole.size)
    if made is not None:
        np.testing.assert_array_equal(np.asarray(made), expected)


def test_a_png_that_is_not_8_bit_rgb_has_no_banded_thumbnail():
    buffer = io.BytesIO()
    Image.new("L", (900, 900)).save(buffer, "PNG")
    with pytest.raises(NotBanded):
        png_thumbnail(buffer.getvalue(), 64)

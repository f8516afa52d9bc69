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

from models.images import (
    encode_image,
    load_image,
    load_mask,
    mask_from_rgb,
    pil_to_tensor,
    pil_to_uint8,
    resize_max_side,
    save_image,
    to_uint8,
)


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
        load_mask(tmp_path / "m.png", (5, 7)), image.mean(0, keepdim=True)[None], atol=1e-7, rtol=0
    )
    assert load_mask(tmp_path / "m.png", (10, 14)).shape == (1, 1, 10, 14)


@settings(max_examples=40, deadline=None)
@given(
    height=st.integers(1, 300),
    width=st.integers(1, 300),
    max_side=st.integers(1, 256),
)
def test_resize_max_side_bounds_the_longer_side_and_keeps_the_aspect(height, width, max_side):
    image = torch.rand(3, height, width)
    out = resize_max_side(image, max_side)
    h, w = out.shape[-2:]
    if max(height, width) <= max_side:
        assert out is image
        return
    assert max(h, w) == max_side
    scale = max_side / max(height, width)  # both sides scaled alike, rounded, at least 1
    assert abs(h - height * scale) <= 0.5 or h == 1
    assert abs(w - width * scale) <= 0.5 or w == 1
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0


def test_resize_max_side_resizes_a_batch_as_each_image_alone():
    batch = torch.rand(2, 3, 50, 70, generator=torch.Generator().manual_seed(0))
    out = resize_max_side(batch, 20)
    assert out.shape == (2, 3, 14, 20)
    for image, resized in zip(batch, out, strict=True):
        torch.testing.assert_close(resize_max_side(image, 20), resized)


def test_resize_rejects_a_bad_side():
    with pytest.raises(ValueError):
        resize_max_side(torch.rand(3, 4, 4), 0)


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

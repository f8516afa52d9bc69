"""The style-transfer quality targets (docs/style-transfer.md) with the shared weights on
the shared photos and paintings.

A few pairs at 256 px keep this fast; benchmarks/adain_quality.py reports the whole
photo x painting grid with the same measures.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest
import torch

from models.adain import StyleTransfer
from models.adain.color import rgb_to_ycbcr
from models.adain.metrics import psnr, style_loss, style_loss_ratio
from models.adain.presets import PRESETS, Preset
from models.images import load_image

pytestmark = pytest.mark.weights

PAIRS = [
    ("astronaut", "the_scream"),
    ("chelsea", "starry_night"),
    ("coffee", "wave"),
    ("rocket", "udnie"),
]


@pytest.fixture(scope="module")
def model(shared_weights_dir):
    return StyleTransfer.from_pretrained([shared_weights_dir])


def _photo(folder, name, size=256):
    (path,) = (folder / "content").glob(f"{name}.*")
    return load_image(path, max_side=size)


def _painting(folder, name, size=256):
    (path,) = (folder / "style").glob(f"{name}.*")
    return load_image(path, max_side=size)


def test_default_style_loss_ratio(model, shared_images_dir):
    ratios = []
    for photo_name, painting_name in PAIRS:
        photo = _photo(shared_images_dir, photo_name)
        painting = _painting(shared_images_dir, painting_name)
        out = model.stylize(photo, [painting])
        ratios.append(float(style_loss_ratio(model.encoder, out, photo, painting)[0]))
    assert max(ratios) <= 0.45, ratios
    assert statistics.median(ratios) <= 0.12, ratios


@pytest.mark.parametrize("photo_name", [name for name, _ in PAIRS])
def test_reconstruction_psnr_at_512(model, shared_images_dir, photo_name):
    photo = _photo(shared_images_dir, photo_name, size=512)
    out = model.stylize(photo, [_painting(shared_images_dir, "wave")], alpha=0.0)
    assert float(psnr(out, photo)[0]) >= 27.0


def test_preserve_color_keeps_mean_chroma(model, shared_images_dir):
    for photo_name, painting_name in PAIRS[:2]:
        photo = _photo(shared_images_dir, photo_name)
        out = model.stylize(
            photo, [_painting(shared_images_dir, painting_name)], preserve_color=True
        )
        diff = (rgb_to_ycbcr(out)[:, 1:] - rgb_to_ycbcr(photo)[:, 1:]).mean(dim=(2, 3)).abs()
        assert float(diff.max()) * 255 <= 3.0


def test_masks_put_each_style_in_its_region(model, shared_images_dir):
    photo = _photo(shared_images_dir, "chelsea")
    styles = [
        _painting(shared_images_dir, "starry_night"),
        _painting(shared_images_dir, "the_scream"),
    ]
    width = photo.shape[-1]
    left = torch.zeros(1, 1, *photo.shape[-2:])
    left[..., : width // 2] = 1.0
    out = model.stylize(photo, styles, masks=[left, 1 - left])
    regions = [out[..., : width // 2 - 8], out[..., width // 2 + 8 :]]
    for own, region in enumerate(regions):
        mine = float(style_loss(model.encoder, region, styles[own])[0])
        other = float(style_loss(model.encoder, region, styles[1 - own])[0])
        assert mine < 0.5 * other, (own, mine, other)


@pytest.mark.parametrize("preset", ["quality", "realtime"])
def test_a_flat_photo_takes_the_style_texture_and_only_the_style_texture(
    model, shared_images_dir, preset
):
    """The flat-region noise (models.adain.pyramid.fill_flat_regions) becomes the style's
    texture: a painting's strokes over a flat photo, the same on every call; and nothing
    where the style itself is flat (no pattern the style does not have)."""
    photo = torch.full((1, 3, 256, 256), 0.4)
    painting = _painting(shared_images_dir, "starry_night")
    out = model.stylize(photo, [painting], preset=preset)
    assert float(out.std(dim=(2, 3)).min()) > 0.05
    torch.testing.assert_close(model.stylize(photo, [painting], preset=preset), out)
    flat_style = torch.tensor([0.2, 0.7, 0.5]).view(1, 3, 1, 1).expand(1, 3, 64, 64)
    flat_out = model.stylize(photo, [flat_style], preset=preset)
    assert float(flat_out.std(dim=(2, 3)).max()) < 1e-5


def test_masked_out_regions_take_no_noise(model, shared_images_dir, monkeypatch):
    """Where no mask owns a pixel the photo is kept, so the flat-region noise stays out:
    with an empty mask the output is the preset's without any noise."""
    photo = _photo(shared_images_dir, "rocket")
    painting = _painting(shared_images_dir, "starry_night")
    empty = [torch.zeros(1, 1, *photo.shape[-2:])]
    kept = model.stylize(photo, [painting], masks=empty, preset="quality")
    noisy = model.stylize(photo, [painting], preset="quality")
    quiet = PRESETS["quality"]
    quiet = Preset(quiet.name, tuple(replace(s, flat_noise=0.0) for s in quiet.stages))
    monkeypatch.setitem(PRESETS, "quality", quiet)
    torch.testing.assert_close(
        model.stylize(photo, [painting], masks=empty, preset="quality"), kept
    )
    assert float((model.stylize(photo, [painting], preset="quality") - noisy).abs().max()) > 0.1

"""The style-transfer quality targets (docs/style-transfer.md) with the shared weights on
the shared photos and paintings.

A few pairs at 256 px keep this fast; benchmarks/adain_quality.py reports the whole
photo x painting grid with the same measures.
"""

from __future__ import annotations

import statistics

import pytest
import torch

from models.adain import StyleTransfer
from models.adain.color import rgb_to_ycbcr
from models.adain.metrics import psnr, style_loss, style_loss_ratio
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
    return StyleTransfer.from_pretrained([shared_weights_dir], fast=False)  # float32 reference


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

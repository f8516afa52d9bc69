"""The banded relu1_1 pass against the whole-map one: grid, bands, edges, batches."""

from __future__ import annotations

import pytest
import torch

import models.adain.banded as banded_module
from models.adain.banded import BandedRelu11, relu1_1_grid_features
from models.adain.pipeline import StyleTransfer
from models.adain.whitening import CovarianceStats, grid_stride, wct_affine
from tests.models.seeded import seeded_rand

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture
def networks64(tiny_networks):
    """The tiny random encoder and relu1_1 decoder in float64, so differences are the
    forms', not float32 rounding."""
    encoder, decoders = tiny_networks
    return encoder.double().eval(), decoders["relu1_1"].double().eval()


def _image(*shape, seed):
    return seeded_rand(*shape, seed=seed, dtype=torch.float64)


def _affine(batch, seed):
    gen = torch.Generator().manual_seed(seed)
    matrix = torch.randn(batch, 64, 64, generator=gen, dtype=torch.float64) / 8
    return matrix, torch.randn(batch, 64, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("size", [(3, 3), (5, 7), (37, 23), (64, 41)])
@pytest.mark.parametrize("band_rows", [4, 7, 100])
def test_bands_decode_what_the_whole_map_decodes(networks64, monkeypatch, size, band_rows):
    """Every band (the first and last with their reflected rows, the columns of each) and
    every batch row with its own map equal the decoder on the whole relu1_1 map."""
    encoder, decoder = networks64
    monkeypatch.setattr(banded_module, "BAND_BYTES", band_rows * (size[1] + 2) * 64 * 8)
    images = _image(2, 3, *size, seed=1)
    matrix, shift = _affine(2, seed=2)
    with torch.no_grad():
        expected = decoder.forward_linear(encoder.encode(images, "relu1_1"), matrix, shift)
        banded = BandedRelu11(encoder, decoder)
        got = banded.decode(banded.padded_input(images), matrix, shift)
        shared = banded.decode(banded.padded_input(images), matrix[:1], shift[:1])
        expected_shared = decoder.forward_linear(
            encoder.encode(images, "relu1_1"), matrix[:1], shift[:1]
        )
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(shared, expected_shared, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_grid_features_are_the_map_at_the_grid_positions(networks64, stride):
    encoder, decoder = networks64
    images = _image(2, 3, 29, 34, seed=3)
    banded = BandedRelu11(encoder, decoder)
    with torch.no_grad():
        whole = encoder.encode(images, "relu1_1")[..., ::stride, ::stride]
        grid = banded.grid_features(banded.padded_input(images), stride)
    assert grid.shape == (2, 64, whole.shape[-2] * whole.shape[-1])
    torch.testing.assert_close(grid, whole.flatten(2), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_a_styles_grid_features_are_its_map_at_the_grid_positions(networks64, stride):
    encoder, _ = networks64
    images = _image(2, 3, 31, 26, seed=8)
    with torch.no_grad():
        whole = encoder.encode(images, "relu1_1")[..., ::stride, ::stride]
        grid = relu1_1_grid_features(encoder, images, stride)
    torch.testing.assert_close(grid, whole.flatten(2), rtol=1e-10, atol=1e-10)


def test_a_large_styles_relu1_1_statistics_never_make_its_whole_map(tiny_networks, monkeypatch):
    """A WCT style past the grid limit at relu1_1 alone (the presets' full-size stage):
    the statistics of the whole map's grid, from the grid only (the encoder never runs)."""
    encoder, decoders = tiny_networks
    model = StyleTransfer(encoder, decoders, cache_size=0)
    style = _image(1, 3, 310, 280, seed=9).float()  # 86,800 positions: stride 2
    assert grid_stride(310, 280) == 2
    with torch.no_grad():
        expected = CovarianceStats.of(encoder.encode(style, "relu1_1"))
    calls = []
    monkeypatch.setattr(type(encoder), "forward", lambda *args: calls.append(args))
    got = model.style_stats(style, ["relu1_1"], "wct")["relu1_1"]
    assert calls == []
    assert isinstance(got, CovarianceStats)
    torch.testing.assert_close(got.mean, expected.mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.root, expected.root, rtol=1e-4, atol=1e-5)


def test_the_grid_statistics_are_those_of_the_whole_maps_grid(networks64):
    """The affine map from the strided features is the one ``wct_affine`` computes from
    the whole map (which reads the same grid past ``COVARIANCE_POSITIONS``)."""
    encoder, decoder = networks64
    images = _image(1, 3, 300, 260, seed=4)  # 78,000 positions: stride 2
    style = CovarianceStats.of(encoder.encode(_image(1, 3, 40, 40, seed=5), "relu1_1"))
    banded = BandedRelu11(encoder, decoder)
    stride = grid_stride(300, 260)
    assert stride == 2
    with torch.no_grad():
        expected = wct_affine(encoder.encode(images, "relu1_1"), [style], weights=[1.0])
        got = wct_affine(
            banded.grid_features(banded.padded_input(images), stride), [style], weights=[1.0]
        )
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-8)


def test_a_banded_pass_refuses_what_it_cannot_take(tiny_networks):
    encoder, decoders = tiny_networks
    with pytest.raises(ValueError, match="relu1_1 decoder"):
        BandedRelu11(encoder, decoders["relu2_1"])
    banded = BandedRelu11(encoder, decoders["relu1_1"])
    with pytest.raises(ValueError, match="at least 3 x 3"):
        banded.padded_input(torch.rand(1, 3, 2, 9))


@pytest.mark.parametrize("preset", ["quality", "realtime"])
def test_stylize_gives_what_the_whole_map_passes_give(tiny_networks, monkeypatch, preset):
    """The presets end to end on a photo whose full-size relu1_1 map is read on a grid:
    the same image with the banded pass as with the whole-map one, to float32 rounding."""
    encoder, decoders = tiny_networks
    model = StyleTransfer(encoder, decoders)
    content = _image(1, 3, 270, 250, seed=6).float()
    style = _image(1, 3, 90, 120, seed=7).float()
    shapes = []
    decode = BandedRelu11.decode

    def spy(self, padded, matrix, shift):
        shapes.append(tuple(padded.shape[-2:]))
        return decode(self, padded, matrix, shift)

    monkeypatch.setattr(BandedRelu11, "decode", spy)
    banded = model.stylize(content, [style], preset=preset)
    assert shapes == [(274, 254)]  # the full-size pass only: 1/2 scale is under the grid limit
    monkeypatch.setattr(StyleTransfer, "_banded_fits", lambda self, image, level: False)
    whole = model.stylize(content, [style], preset=preset)
    assert len(shapes) == 1
    torch.testing.assert_close(banded, whole, rtol=0, atol=2e-4)
    assert (banded - whole).abs().mean() < 1e-5

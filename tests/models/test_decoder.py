"""Decoders mirror the encoder with the published Sequential-index layouts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from models.adain.metrics import psnr
from models.bands import BAND_ROWS, BANDED_FROM_ROWS
from models.checkpoints import load_state_dict
from models.decoder import Decoder, conv3x3_reflect, decoder_halo_rows, level_of_decoder
from models.images import load_image
from models.vgg import LEVELS, VGGEncoder, level_channels, level_stride

# Conv indices of the published decoders: WCT feature_invertor_conv*_1.pth and the AdaIN
# release's decoder.pth (relu4_1).
PUBLISHED_CONVS = {
    "relu1_1": (1,),
    "relu2_1": (1, 5, 8),
    "relu3_1": (1, 5, 8, 12, 15),
    "relu4_1": (1, 5, 8, 11, 14, 18, 21, 25, 28),
}


@pytest.mark.parametrize("level", LEVELS)
def test_layout_matches_published_indices(level):
    decoder = Decoder(level)
    convs = tuple(i for i, m in enumerate(decoder.layers) if isinstance(m, nn.Conv2d))
    assert convs == PUBLISHED_CONVS[level]
    assert decoder.layers[convs[0]].in_channels == level_channels(level)
    assert decoder.layers[convs[-1]].out_channels == 3
    assert not isinstance(decoder.layers[-1], nn.ReLU)
    upsamples = sum(isinstance(m, nn.Upsample) for m in decoder.layers)
    assert 2**upsamples == level_stride(level)


@pytest.mark.parametrize("level", LEVELS)
def test_output_shape_inverts_the_encoder(level):
    decoder = Decoder(level)
    features = VGGEncoder(level).encode(torch.rand(1, 3, 16, 24), level)
    assert decoder(features).shape == (1, 3, 16, 24)


def test_loads_synthetic_adain_relu4_1_decoder_and_infers_level(random_published_state):
    state = random_published_state(Decoder("relu4_1"), 7)
    assert level_of_decoder(state) == "relu4_1"
    decoder = Decoder.from_state_dict(state)
    for key, value in state.items():
        assert torch.equal(decoder.layers.state_dict()[key], value)


def test_mismatched_checkpoints_are_rejected(random_published_state):
    state = random_published_state(Decoder("relu2_1"), 8)
    with pytest.raises(ValueError, match="missing layers"):
        Decoder("relu3_1").load_published(state)
    with pytest.raises(ValueError, match="unexpected layers"):
        Decoder("relu1_1").load_published(state)
    with pytest.raises(ValueError, match="decoder expects"):
        Decoder("relu2_1")(torch.rand(1, 64, 4, 4))


@pytest.mark.weights
@pytest.mark.parametrize("level", ["relu1_1", "relu2_1", "relu3_1"])
def test_shared_decoders_reconstruct_a_photo(shared_weights_dir, shared_images_dir, level):
    folder = shared_weights_dir / "vgg19-normalised"
    encoder = VGGEncoder.from_state_dict(load_state_dict(folder / "vgg_normalised_conv3_1.pth"))
    decoder = Decoder.from_state_dict(
        load_state_dict(folder / f"feature_invertor_conv{level[4:]}.pth")
    )
    photo = load_image(shared_images_dir / "content" / "chelsea.png", max_side=128)
    with torch.no_grad():
        out = decoder(encoder.encode(photo, level))[..., : photo.shape[2], : photo.shape[3]]
    out = out.clamp(0, 1)
    assert float(psnr(out, photo)[0]) > 24.0


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shared", [True, False])
def test_folded_linear_map_equals_decoding_the_transformed_features(level, shared):
    gen = torch.Generator().manual_seed(11)
    decoder = Decoder(level).double().eval()
    channels = level_channels(level)
    features = torch.rand(3, channels, 5, 6, generator=gen, dtype=torch.float64)
    rows = 1 if shared else 3
    matrix = torch.randn(rows, channels, channels, generator=gen, dtype=torch.float64)
    shift = torch.randn(rows, channels, generator=gen, dtype=torch.float64)
    mapped = torch.einsum("bjc,bchw->bjhw", matrix.expand(3, -1, -1), features)
    with torch.no_grad():
        expected = decoder(mapped + shift[:, :, None, None])
        got = decoder.forward_linear(features, matrix, shift)
        written = decoder.linear_then_decode(  # the GPU's form
            features, matrix.expand(3, -1, -1), shift.expand(3, -1)
        )
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(written, expected, rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="decoder expects"):
        decoder.forward_linear(features[:, :1], matrix, shift)


@pytest.mark.parametrize("level", ["relu1_1", "relu2_1", "relu3_1"])
@pytest.mark.parametrize("extra_rows", [0, 3])
def test_a_tall_image_is_decoded_in_bands_with_the_whole_maps_pixels(level, extra_rows):
    """From ``BANDED_FROM_ROWS`` image rows on, a CPU decode runs a band of rows at a
    time (each first convolution sees a band and its halo, never the whole map) and
    gives the whole decode's pixels, plain and with a folded linear map."""
    gen = torch.Generator().manual_seed(13)
    decoder = Decoder(level).double().eval()
    channels, stride = level_channels(level), level_stride(level)
    rows = BANDED_FROM_ROWS // stride + extra_rows
    features = torch.rand(2, channels, rows, 3, generator=gen, dtype=torch.float64)
    matrix = torch.randn(2, channels, channels, generator=gen, dtype=torch.float64) / channels
    shift = torch.randn(2, channels, generator=gen, dtype=torch.float64)
    seen: list[int] = []
    first = decoder.layers[1] if level != "relu1_1" else None
    if first is not None:
        first.register_forward_hook(lambda module, args, out: seen.append(out.shape[-2]))
    with torch.no_grad():
        whole = decoder.layers(features.clone())
        seen.clear()  # the whole map's, as the reference
        torch.testing.assert_close(decoder(features), whole, rtol=1e-12, atol=1e-12)
        for shared in (slice(0, 1), slice(None)):
            got = decoder.forward_linear(features, matrix[shared], shift[shared])
            expected = decoder._decode_folded(features, matrix[shared], shift[shared])
            torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    if first is not None:
        assert max(seen) <= BAND_ROWS // stride + 2 * decoder_halo_rows(level) + 2
        assert len(seen) > 1


def test_the_decoders_halo_is_what_a_cut_spoils():
    assert [decoder_halo_rows(level) for level in LEVELS] == [1, 2, 3, 4]


@pytest.mark.parametrize("size", [(2, 5), (3, 3), (4, 7), (9, 6)])
def test_conv3x3_reflect_equals_padding_then_convolving(size):
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(2, 6, *size, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(4, 6, 3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, generator=gen, dtype=torch.float64)
    expected = nn.functional.conv2d(
        nn.functional.pad(x, (1, 1, 1, 1), mode="reflect"), weight, bias
    )
    got = conv3x3_reflect(x, weight, bias)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    # and it trains alike: the same gradients
    grads = torch.autograd.grad((got * expected.detach()).sum(), (x, weight))
    expected_grads = torch.autograd.grad((expected * expected.detach()).sum(), (x, weight))
    for a, b in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("level", LEVELS)
def test_forward_is_the_published_layer_sequence(level):
    decoder = Decoder(level).double().eval()
    features = torch.rand(2, level_channels(level), 4, 5, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(decoder(features), decoder.layers(features.clone()))


@pytest.mark.parametrize("rows", [1, 3])
def test_folded_linear_map_reads_nothing_back(rows):
    from models.devices import HostReads

    decoder = Decoder("relu2_1").eval()
    channels = level_channels("relu2_1")
    features = torch.rand(3, channels, 5, 6)
    matrix = torch.diag_embed(torch.rand(rows, channels) + 0.5)
    shift = torch.randn(rows, channels)
    with torch.no_grad(), HostReads() as reads:
        decoder.forward_linear(features, matrix, shift)
    assert reads.names == []

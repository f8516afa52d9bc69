"""The normalised VGG-19 encoder: published layout, loading, features vs a functional reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from models.bands import BAND_MAX_WIDTH, BAND_ROWS, BANDED_FROM_ROWS
from models.checkpoints import load_state_dict
from models.vgg import (
    LEVELS,
    VGGEncoder,
    deepest_level_in,
    halo_rows,
    level_channels,
    level_stride,
)

# Sequential indices of the convolutions in the AdaIN release's vgg_normalised.pth up to
# relu4_1 (pytorch-AdaIN's net.vgg[:31]) and of the ReLU ending each level.
RELU4_1_CONVS = (0, 2, 5, 9, 12, 16, 19, 22, 25, 29)
LEVEL_RELU = {"relu1_1": 3, "relu2_1": 10, "relu3_1": 17, "relu4_1": 30}


def test_layout_matches_published_indices():
    encoder = VGGEncoder("relu4_1")
    convs = tuple(i for i, m in enumerate(encoder.layers) if isinstance(m, nn.Conv2d))
    pools = tuple(i for i, m in enumerate(encoder.layers) if isinstance(m, nn.MaxPool2d))
    assert convs == RELU4_1_CONVS
    assert pools == (7, 14, 27)
    assert encoder.level_index == LEVEL_RELU
    assert len(encoder.layers) == 31
    assert all(encoder.layers[i].ceil_mode for i in pools)


@pytest.mark.parametrize("depth", LEVELS)
def test_shallower_encoder_is_a_prefix(depth):
    deep, shallow = VGGEncoder("relu4_1"), VGGEncoder(depth)
    assert len(shallow.layers) == LEVEL_RELU[depth] + 1
    for a, b in zip(shallow.layers, deep.layers, strict=False):
        assert type(a) is type(b)
        if isinstance(a, nn.Conv2d):
            assert a.weight.shape == b.weight.shape


def test_loads_synthetic_adain_release_up_to_relu4_1(random_published_state):
    """A full release-style file (layers beyond relu4_1, up to relu5_4) loads as a prefix."""
    layout = VGGEncoder("relu4_1")
    state = random_published_state(layout, 1)
    extra = {"32.weight": torch.zeros(512, 512, 3, 3), "32.bias": torch.zeros(512)}
    encoder = VGGEncoder.from_state_dict({**state, **extra})
    assert encoder.depth == "relu4_1"
    for key, value in state.items():
        assert torch.equal(encoder.layers.state_dict()[key], value)


def test_depth_is_the_deepest_complete_prefix(random_published_state):
    state = random_published_state(VGGEncoder("relu2_1"), 2)
    assert deepest_level_in(state) == "relu2_1"
    with pytest.raises(ValueError, match="missing layers"):
        VGGEncoder.from_state_dict(state, depth="relu3_1")


def test_wrong_shape_and_unknown_keys_are_rejected(random_published_state):
    state = random_published_state(VGGEncoder("relu1_1"), 3)
    with pytest.raises(ValueError, match="expected shape"):
        VGGEncoder("relu1_1").load_published({**state, "2.weight": torch.zeros(64, 3, 5, 5)})
    with pytest.raises(ValueError, match="unexpected checkpoint key"):
        VGGEncoder("relu1_1").load_published({**state, "conv1.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="unknown feature level"):
        VGGEncoder("relu5_1")


def _reference_features(state: dict[str, torch.Tensor], x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Float64 functional VGG: 1x1 conv, then (reflect pad, 3x3 conv, relu) / ceil max-pools."""
    x = F.conv2d(x.double(), state["0.weight"].double(), state["0.bias"].double())
    plan = [(2, "relu1_1"), (5, None), "pool", (9, "relu2_1"), (12, None), "pool", (16, "relu3_1")]
    out = {}
    for step in plan:
        if step == "pool":
            x = F.max_pool2d(x, 2, 2, ceil_mode=True)
            continue
        index, level = step
        x = F.pad(x, (1, 1, 1, 1), mode="reflect")
        x = F.relu(F.conv2d(x, state[f"{index}.weight"].double(), state[f"{index}.bias"].double()))
        if level:
            out[level] = x
    return out


@pytest.mark.parametrize("size", [(16, 16), (13, 22), (9, 7)])
def test_features_match_functional_reference(size, random_published_state):
    encoder = VGGEncoder("relu3_1")
    state = random_published_state(encoder, 4)
    encoder.load_published(state)
    x = torch.rand(2, 3, *size, generator=torch.Generator().manual_seed(5))
    features = encoder(x)
    reference = _reference_features(state, x)
    for level in ("relu1_1", "relu2_1", "relu3_1"):
        stride = level_stride(level)
        expected_shape = (2, level_channels(level), -(-size[0] // stride), -(-size[1] // stride))
        assert features[level].shape == expected_shape
        torch.testing.assert_close(features[level].double(), reference[level], rtol=1e-4, atol=1e-5)


def _conv1_1_rows(encoder: VGGEncoder) -> list[int]:
    """The rows of each relu1_1 convolution output from now on (a forward hook)."""
    rows: list[int] = []
    encoder.layers[2].register_forward_hook(lambda module, args, out: rows.append(out.shape[-2]))
    return rows


@pytest.mark.parametrize("height", [512, 513, 515, 600, 703])
@pytest.mark.parametrize("levels", [None, ("relu1_1",), ("relu2_1", "relu3_1")])
def test_a_tall_image_is_encoded_in_bands_with_the_whole_images_features(
    height, levels, random_published_state
):
    encoder = VGGEncoder("relu3_1")
    state = random_published_state(encoder, 6)
    encoder.load_published(state)
    x = torch.rand(2, 3, height, 11, generator=torch.Generator().manual_seed(height))
    rows = _conv1_1_rows(encoder)
    with torch.inference_mode():
        features = encoder(x, levels)
        whole = encoder._whole(x, set(features))
    deepest = max(features, key=LEVELS.index)
    assert max(rows[:-1]) <= BAND_ROWS + 2 * halo_rows(deepest)  # never the whole map
    assert len(rows) - 1 == -(-height // BAND_ROWS)  # one forward a band (then the whole)
    reference = _reference_features(state, x)
    for level, feature in features.items():
        torch.testing.assert_close(feature, whole[level], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(feature.double(), reference[level], rtol=1e-4, atol=1e-5)


def test_the_halo_is_what_a_cut_spoils_and_deep_short_or_wide_forwards_stay_whole():
    assert [halo_rows(level) for level in LEVELS] == [1, 4, 12, 32]
    cases = (
        ("relu4_1", 600, 16),
        ("relu3_1", BANDED_FROM_ROWS - 1, 16),
        ("relu3_1", BANDED_FROM_ROWS, BAND_MAX_WIDTH + 1),
    )
    for depth, height, width in cases:
        encoder = VGGEncoder(depth)
        rows = _conv1_1_rows(encoder)
        with torch.inference_mode():
            encoder(torch.rand(1, 3, height, width))
        assert rows == [height]


def test_forward_rejects_bad_requests():
    encoder = VGGEncoder("relu2_1")
    with pytest.raises(ValueError, match="deeper than"):
        encoder(torch.rand(1, 3, 8, 8), ["relu3_1"])
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        encoder(torch.rand(1, 4, 8, 8))


@pytest.mark.weights
def test_first_conv_folds_the_preprocessing(shared_weights_dir):
    """Layer 0 maps RGB in [0, 1] to BGR * 255 minus the ImageNet mean (Caffe VGG input)."""
    state = load_state_dict(shared_weights_dir / "vgg19-normalised/vgg_normalised_conv3_1.pth")
    encoder = VGGEncoder.from_state_dict(state)
    x = torch.rand(1, 3, 4, 4, dtype=torch.float64)
    bgr_mean = torch.tensor([103.939, 116.779, 123.68], dtype=torch.float64)
    expected = x.flip(1) * 255 - bgr_mean[None, :, None, None]
    got = encoder.layers[0].double()(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-3)

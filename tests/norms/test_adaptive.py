"""AdaIN, conditional instance norm, adaLN modulation and the adaLN / adaLN-Zero modules."""

import norms_reference as ref
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from norms import F

# ---------------------------------------------------------------------------- adain


@pytest.mark.parametrize(
    ("content_shape", "style_shape"),
    [
        ((2, 3, 5, 7), (2, 3, 5, 7)),
        ((4, 3, 6, 6), (1, 3, 4, 9)),  # style batch 1 broadcasts; spatial sizes differ
        ((2, 5, 11), (2, 5, 3)),  # 1-d signals
        ((2, 2, 3, 4, 5), (1, 2, 2, 2, 2)),  # volumes
    ],
)
def test_adain_matches_float64_reference(gen, content_shape, style_shape):
    content = torch.randn(content_shape, generator=gen) * 3 + 1
    style = torch.randn(style_shape, generator=gen) * 0.5 - 2
    out = F.adain(content, style)
    assert out.dtype == content.dtype and out.shape == content.shape
    torch.testing.assert_close(out.double(), ref.adain(content, style), rtol=1e-5, atol=1e-5)


@given(
    batch=st.integers(1, 3),
    channels=st.integers(1, 4),
    side=st.integers(2, 6),
    style_scale=st.floats(0.1, 10.0),
    style_shift=st.floats(-50.0, 50.0),
    seed=st.integers(0, 2**16),
)
def test_adain_output_carries_the_style_statistics(
    batch, channels, side, style_scale, style_shift, seed
):
    gen = torch.Generator().manual_seed(seed)
    content = torch.randn(batch, channels, side, side + 1, generator=gen, dtype=torch.float64)
    style = torch.randn(1, channels, side + 2, side, generator=gen, dtype=torch.float64)
    style = style * style_scale + style_shift
    eps = 1e-5
    out = F.adain(content, style, eps=eps)
    out_mean, out_std = F.channel_mean_std(out, eps=0.0)
    style_mean, style_std = F.channel_mean_std(style, eps=eps)
    # Output std is sigma_s * sqrt(var_c) / sqrt(var_c + eps): equal to sigma_s up to eps.
    _, content_var = ref.spatial_mean_var(content)
    shrink = torch.sqrt(content_var / (content_var + eps)).reshape(out_std.shape)
    torch.testing.assert_close(out_mean, style_mean.expand_as(out_mean))
    torch.testing.assert_close(out_std, style_std.expand_as(out_std) * shrink)


def test_channel_mean_std_matches_reference(gen):
    x = torch.randn(3, 4, 5, 6, generator=gen)
    mean, std = F.channel_mean_std(x, eps=1e-3)
    ref_mean, ref_var = ref.spatial_mean_var(x)
    assert mean.shape == std.shape == (3, 4, 1, 1)
    torch.testing.assert_close(mean.double().flatten(), ref_mean.flatten())
    torch.testing.assert_close(std.double().flatten(), torch.sqrt(ref_var + 1e-3).flatten())


def test_adain_keeps_low_precision_dtype(gen):
    content = torch.randn(2, 3, 8, 8, generator=gen).bfloat16()
    style = torch.randn(1, 3, 8, 8, generator=gen).bfloat16() * 4 + 3
    out = F.adain(content, style)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref.adain(content, style), rtol=2e-2, atol=5e-2)


def test_adain_gradcheck():
    gen = torch.Generator().manual_seed(1)
    content = torch.randn(2, 2, 3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    style = torch.randn(1, 2, 4, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda c, s: F.adain(c, s), (content, style))


@pytest.mark.parametrize(
    ("content_shape", "style_shape", "match"),
    [
        ((2, 3, 4, 4), (2, 4, 4, 4), "channel"),
        ((3, 3, 4, 4), (2, 3, 4, 4), "batch"),
        ((2, 3), (2, 3), "spatial"),
        ((2, 3, 4, 4), (2, 3, 16), "rank"),
    ],
)
def test_adain_rejects_mismatched_inputs(content_shape, style_shape, match):
    with pytest.raises(ValueError, match=match):
        F.adain(torch.zeros(content_shape), torch.zeros(style_shape))

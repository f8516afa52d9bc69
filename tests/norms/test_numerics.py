"""Large common offsets (1e4 + N(0, 1)) normalise correctly in float32 and bfloat16.

Each member is compared with its float64 reference evaluated on the *same* (already
rounded) input, so the only error measured is the member's own arithmetic. The
one-pass E[x^2] - E[x]^2 formula fails these checks (see the first test).
"""

import norms_reference as ref
import pytest
import torch

from norms import F

OFFSET = 1e4
#: bfloat16 holds 8 significant bits: 1e4 + N(0, 1) would round to one constant (9984),
#: so its inputs sit at 1e2, where they still vary (ulp 0.5).
OFFSET_BF16 = 1e2
TOLERANCE = {
    torch.float32: {"rtol": 1e-3, "atol": 1e-2},  # ulp(1e4) ~ 1e-3 in float32
    torch.bfloat16: {"rtol": 1e-2, "atol": 2e-2},  # output rounding, 2^-8 relative
}


def _offset_input(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    offset = OFFSET_BF16 if dtype == torch.bfloat16 else OFFSET
    return (offset + torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)


def test_the_one_pass_formula_would_fail_these_checks():
    x = _offset_input((4, 256), torch.float32)
    one_pass = (x * x).mean(-1) - x.mean(-1) ** 2
    true_var = x.double().var(-1, correction=0)
    assert (one_pass.double() - true_var).abs().max() > 1.0  # true variance is ~1


def _image(dtype, channels_last=False):
    x = _offset_input((2, 4, 8, 8), dtype)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("channels_last", [False, True])
def test_group_and_instance_norm(dtype, channels_last):
    x = _image(dtype, channels_last)
    weight, bias = torch.linspace(0.5, 2.0, 4), torch.linspace(-1.0, 1.0, 4)
    got = F.group_norm(x, 2, weight, bias)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), ref.group_norm(x, 2, weight, bias), **TOLERANCE[dtype])
    got = F.instance_norm(x, weight, bias)
    torch.testing.assert_close(got.double(), ref.instance_norm(x, weight, bias), **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_instance_norm_running_statistics(dtype):
    x = _image(dtype)
    running_mean, running_var = torch.zeros(4), torch.ones(4)
    got = F.instance_norm(x, running_mean=running_mean, running_var=running_var, momentum=1.0)
    torch.testing.assert_close(got.double(), ref.instance_norm(x), **TOLERANCE[dtype])
    mean, var = ref.spatial_mean_var(x)
    spatial = x[0, 0].numel()
    torch.testing.assert_close(running_mean.double(), mean.mean(0))
    torch.testing.assert_close(running_var.double(), (var * spatial / (spatial - 1)).mean(0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_rms_lp_norm_and_ada_layer_norm(dtype):
    x = _offset_input((2, 3, 64), dtype)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(F.layer_norm(x, 64).double(), ref.layer_norm(x, 1), **tol)
    torch.testing.assert_close(F.rms_norm(x, 64).double(), ref.rms_norm(x, 1), **tol)
    torch.testing.assert_close(F.lp_norm(x, 3.0, 64).double(), ref.lp_norm(x, 3.0, 1), **tol)
    shift, scale = torch.linspace(-1, 1, 64).expand(2, 64), torch.linspace(0, 1, 64).expand(2, 64)
    torch.testing.assert_close(
        F.ada_layer_norm(x, shift, scale).double(), ref.ada_layer_norm(x, shift, scale), **tol
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_adain_and_conditional_instance_norm(dtype):
    content = _image(dtype)
    style = _offset_input((1, 4, 6, 6), dtype, seed=1)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(F.adain(content, style).double(), ref.adain(content, style), **tol)
    weight, bias = torch.rand(3, 4) + 0.5, torch.randn(3, 4)
    mix = torch.tensor([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    got = F.conditional_instance_norm(content, mix, weight, bias)
    torch.testing.assert_close(
        got.double(), ref.conditional_instance_norm(content, mix.double(), weight, bias), **tol
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_local_members(dtype):
    x = _image(dtype)
    tol = TOLERANCE[dtype]
    got = F.local_contrast_norm(x, 3, 3, alpha=1e-2)
    torch.testing.assert_close(got.double(), ref.local_contrast_norm(x, 3, 3, 1e-2), **tol)
    # Without a mean to remove, LRN and GRN scale the offset: compare relatively.
    got = F.local_response_norm(x, 3, alpha=1e-4)
    torch.testing.assert_close(
        got.double(), ref.local_response_norm(x, 3, 1e-4), rtol=tol["rtol"], atol=0
    )
    # GRN's output keeps the offset's magnitude, and 1 + w * N nearly cancels for w = -1:
    # errors are measured in ulps of the offset.
    weight, bias = torch.linspace(-1, 1, 4), torch.zeros(4)
    got = F.global_response_norm(x, weight, bias)
    want = ref.global_response_norm(x, weight, bias)
    ulp_of_offset = torch.finfo(dtype).eps * OFFSET
    torch.testing.assert_close(got.double(), want, rtol=tol["rtol"], atol=2 * ulp_of_offset)


@pytest.mark.parametrize("affine", ["bfloat16", "float32", "none"])
def test_batch_norm_keeps_the_offset_whatever_the_parameters_dtype(affine):
    # torch's kernel rounds its per-channel shift to bfloat16 unless given float32
    # parameters: far off at 100 + N(0, 1)
    x = _image(torch.bfloat16)
    weight, bias = torch.linspace(0.5, 2.0, 4), torch.linspace(-1.0, 1.0, 4)
    if affine == "none":
        weight = bias = None
    elif affine == "bfloat16":
        weight, bias = weight.bfloat16(), bias.bfloat16()
    got = F.batch_norm(x, weight=weight, bias=bias)
    expected = F.batch_norm(
        x.double(),
        weight=None if weight is None else weight.double(),
        bias=None if bias is None else bias.double(),
    )
    torch.testing.assert_close(got.double(), expected, **TOLERANCE[torch.bfloat16])


@pytest.mark.parametrize("member", ["modulate", "ada_layer_norm"])
def test_bfloat16_modulation_rounds_once(member):
    # every operand in bfloat16, as a bf16 model calls it: the only error allowed is the
    # output's own rounding (half an ulp: bf16's unit roundoff, 2^-8 relative), not (1 + scale) or the
    # normalised tokens rounded on the way (found on an H200 by gpu_check's numerics)
    gen = torch.Generator().manual_seed(7)
    x = (2.0 * torch.randn(8, 64, 256, generator=gen, dtype=torch.float64)).bfloat16()
    shift = torch.randn(8, 256, generator=gen, dtype=torch.float64).bfloat16()
    scale = (0.3 * torch.randn(8, 256, generator=gen, dtype=torch.float64)).bfloat16()
    tokens = x.double() if member == "modulate" else ref.layer_norm(x, 1)
    expected = ref.modulate(tokens, shift, scale)
    got = F.modulate(x, shift, scale) if member == "modulate" else F.ada_layer_norm(x, shift, scale)
    assert got.dtype == torch.bfloat16
    # float32 arithmetic before the one rounding: ~1e-7 of the terms' magnitude
    terms = shift.double().abs()[:, None] + tokens.abs() * (1 + scale.double()).abs()[:, None]
    error = (got.double() - expected).abs()
    excess = error - 2.0**-8 * expected.abs() - 1e-5 * terms
    assert float(excess.max()) <= 0, float((error / terms).max())

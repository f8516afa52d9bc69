"""Local response, local contrast and global response normalization."""

import norms_reference as ref
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import norms
from norms import F

TOL32 = {"rtol": 1e-5, "atol": 1e-6}


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 9])
@pytest.mark.parametrize("shape", [(2, 7, 4, 3), (2, 6, 5), (3, 5), (1, 4, 2, 3, 2)])
def test_local_response_norm_matches_reference(gen, size, shape):
    x = torch.randn(shape, generator=gen) * 4
    got = F.local_response_norm(x, size, alpha=1e-2, beta=0.75, k=2.0)
    torch.testing.assert_close(got.double(), ref.local_response_norm(x, size, 1e-2), **TOL32)


@pytest.mark.parametrize("size", [1, 3, 5, 7])
def test_local_response_norm_is_torch_with_alpha_scaled_by_the_window(gen, size):
    x = torch.randn(2, 8, 6, 5, generator=gen) * 3
    alpha, beta, k = 3e-3, 0.6, 1.5
    theirs = torch.nn.LocalResponseNorm(size, alpha=alpha * size, beta=beta, k=k)
    torch.testing.assert_close(F.local_response_norm(x, size, alpha, beta, k), theirs(x), **TOL32)
    ours = norms.LocalResponseNorm(8, size=size, alpha=alpha, beta=beta, k=k)
    torch.testing.assert_close(ours(x), theirs(x), **TOL32)


def test_local_response_norm_even_size_uses_the_papers_symmetric_window(gen):
    # For even n the AlexNet limits i +- n//2 cover n + 1 channels, torch covers n.
    x = torch.randn(2, 6, 3, 3, generator=gen)
    want = torch.nn.functional.local_response_norm(x, 5, alpha=1e-2 * 5, beta=0.75, k=2.0)
    torch.testing.assert_close(F.local_response_norm(x, 4, alpha=1e-2), want, **TOL32)


@pytest.mark.parametrize(("size", "kernel_size"), [(5, 9), (3, 3), (1, 1), (2, 5)])
def test_local_contrast_norm_matches_reference(gen, size, kernel_size):
    x = torch.randn(2, 4, 7, 6, generator=gen) * 2 + 10
    got = F.local_contrast_norm(x, size, kernel_size, alpha=1e-2)
    want = ref.local_contrast_norm(x, size, kernel_size, alpha=1e-2)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_local_contrast_norm_removes_a_constant_offset(gen):
    x = torch.randn(1, 3, 8, 8, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(F.local_contrast_norm(x + 7.0), F.local_contrast_norm(x))


@pytest.mark.parametrize("shape", [(2, 5, 4, 6), (2, 3, 7), (1, 2, 3, 3, 2)])
def test_global_response_norm_matches_reference(gen, shape):
    x = torch.randn(shape, generator=gen) * 2
    weight, bias = torch.randn(shape[1], generator=gen), torch.randn(shape[1], generator=gen)
    got = F.global_response_norm(x, weight, bias)
    torch.testing.assert_close(got.double(), ref.global_response_norm(x, weight, bias), **TOL32)


@given(
    batch=st.integers(1, 3),
    channels=st.integers(1, 6),
    side=st.integers(1, 5),
    scale=st.floats(1e-3, 1e3),
    seed=st.integers(0, 2**16),
)
def test_global_response_norm_with_zero_parameters_is_identity(batch, channels, side, scale, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, channels, side, side + 1, generator=gen) * scale
    zeros = torch.zeros(channels)
    torch.testing.assert_close(F.global_response_norm(x, zeros, zeros), x, rtol=0, atol=0)
    module = norms.build("global_response", channels)
    torch.testing.assert_close(module(x), x, rtol=0, atol=0)


def test_gradcheck_local_members():
    gen = torch.Generator().manual_seed(7)

    def leaf(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)

    x = leaf(2, 5, 3, 3)
    assert torch.autograd.gradcheck(lambda x: F.local_response_norm(x, 3, 0.1, 0.75, 1.0), (x,))
    assert torch.autograd.gradcheck(lambda x: F.local_contrast_norm(x, 3, 3, 0.1, 0.75, 1.0), (x,))
    weight, bias = leaf(5), leaf(5)
    assert torch.autograd.gradcheck(F.global_response_norm, (x, weight, bias))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.local_response_norm(x, 3, 1e-2),
        lambda x: F.local_contrast_norm(x, 3, 3, 1e-2),
        lambda x: F.global_response_norm(x, torch.ones(4), torch.ones(4)),
    ],
    ids=["lrn", "lcn", "grn"],
)
def test_low_precision_keeps_dtype(gen, fn):
    x = torch.randn(2, 4, 5, 5, generator=gen).bfloat16()
    got = fn(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), fn(x.double()), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize(
    "factory",
    [
        lambda: norms.LocalResponseNorm(4, size=3, alpha=1e-2),
        lambda: norms.LocalContrastNorm(4, size=3, kernel_size=5),
        lambda: norms.GlobalResponseNorm(4),
    ],
    ids=["lrn", "lcn", "grn"],
)
def test_modules_round_trip_and_repr(gen, factory):
    source, target = factory(), factory()
    with torch.no_grad():
        for param in source.parameters():
            param.normal_(generator=gen)
    target.load_state_dict(source.state_dict())
    x = torch.randn(2, 4, 6, 6, generator=gen)
    torch.testing.assert_close(target(x), source(x), rtol=0, atol=0)
    assert repr(source).startswith(type(source).__name__ + "(4")
    with pytest.raises(ValueError, match="expected"):
        source(torch.randn(2, 3, 6, 6))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: F.local_response_norm(torch.zeros(4), 3), r"\(B, C"),
        (lambda: F.local_response_norm(torch.zeros(2, 4), 0), "size"),
        (lambda: F.local_response_norm(torch.zeros(2, 4), 3, alpha=-1.0), "non-negative"),
        (lambda: F.local_response_norm(torch.zeros(2, 4), 3, beta=float("nan")), "finite"),
        (lambda: F.local_contrast_norm(torch.zeros(2, 4, 5)), "H, W"),
        (lambda: F.local_contrast_norm(torch.zeros(1, 4, 5, 5), kernel_size=4), "odd"),
        (
            lambda: F.global_response_norm(torch.zeros(2, 4), torch.zeros(4), torch.zeros(4)),
            "spatial",
        ),
        (
            lambda: F.global_response_norm(torch.zeros(2, 4, 3), torch.zeros(3), torch.zeros(4)),
            "weight",
        ),
        (lambda: norms.LocalResponseNorm(0), "num_features"),
        (lambda: norms.LocalContrastNorm(4, kernel_size=0), "odd"),
        (lambda: norms.GlobalResponseNorm(4, eps=-1.0), "eps"),
    ],
)
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()

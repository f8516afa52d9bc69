"""Weight normalization as a parametrization: reference, torch parity, properties, errors."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.nn.utils import parametrize

import norms
from norms.modules.weight_norm import weight_norm


def _reference_weight(g, v, dim):
    g, v = g.double(), v.double()
    dims = tuple(range(v.dim())) if dim is None else tuple(d for d in range(v.dim()) if d != dim)
    return g * v / torch.sqrt((v * v).sum(dims, keepdim=True))


LAYERS = [
    (lambda: nn.Linear(6, 4), 0, (3, 6)),
    (lambda: nn.Conv2d(3, 5, 3), 0, (2, 3, 6, 6)),
    (lambda: nn.Conv1d(2, 4, 3), 0, (2, 2, 7)),
    (lambda: nn.ConvTranspose2d(3, 4, 2), 1, (2, 3, 4, 4)),
    (lambda: nn.Linear(6, 4), None, (3, 6)),
]
IDS = ["linear", "conv2d", "conv1d", "convtranspose2d_dim1", "linear_whole_tensor"]


@pytest.mark.parametrize(("make", "dim", "input_shape"), LAYERS, ids=IDS)
def test_matches_float64_reference_and_torch_weight_norm(make, dim, input_shape):
    torch.manual_seed(0)
    ours = weight_norm(make(), dim=dim)
    theirs = torch.nn.utils.parametrizations.weight_norm(make(), dim=dim)
    with torch.no_grad():  # move g away from ||v|| so the test sees the scaling
        ours.parametrizations.weight.original0.mul_(
            torch.rand_like(ours.parametrizations.weight.original0) + 0.5
        )
    theirs.load_state_dict(ours.state_dict())
    g = ours.parametrizations.weight.original0
    v = ours.parametrizations.weight.original1
    torch.testing.assert_close(ours.weight.double(), _reference_weight(g, v, dim))
    torch.testing.assert_close(ours.weight, theirs.weight)
    x = torch.randn(input_shape)
    out_ours, out_theirs = ours(x), theirs(x)
    torch.testing.assert_close(out_ours, out_theirs)
    out_ours.square().sum().backward()
    out_theirs.square().sum().backward()
    for got, want in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("make", "dim", "input_shape"), LAYERS, ids=IDS)
def test_registration_keeps_the_function_and_can_be_removed(make, dim, input_shape):
    torch.manual_seed(1)
    layer = make()
    x = torch.randn(input_shape)
    before = layer(x)
    weight_norm(layer, dim=dim)
    assert parametrize.is_parametrized(layer, "weight")
    torch.testing.assert_close(layer(x), before)
    parametrize.remove_parametrizations(layer, "weight")
    assert not parametrize.is_parametrized(layer)
    torch.testing.assert_close(layer(x), before)


@given(
    out_features=st.integers(1, 5),
    in_features=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_each_output_row_has_norm_abs_g(out_features, in_features, seed):
    torch.manual_seed(seed)
    layer = weight_norm(nn.Linear(in_features, out_features))
    g = layer.parametrizations.weight.original0
    with torch.no_grad():
        g.copy_(torch.randn(g.shape))
    row_norms = layer.weight.double().norm(dim=1, keepdim=True)
    torch.testing.assert_close(row_norms, g.double().abs())


def test_gradcheck_of_the_parametrization():
    gen = torch.Generator().manual_seed(9)
    v = torch.randn(4, 3, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, 1, 1, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(norms.WeightNorm(dim=0), (g, v))
    g_last = torch.randn(1, 1, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(norms.WeightNorm(dim=2), (g_last, v))
    g_whole = torch.randn((), generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(norms.WeightNorm(dim=-1), (g_whole, v))


def test_half_precision_weight_keeps_dtype():
    layer = weight_norm(nn.Linear(8, 4).to(torch.bfloat16))
    assert layer.weight.dtype == torch.bfloat16
    g = layer.parametrizations.weight.original0
    v = layer.parametrizations.weight.original1
    torch.testing.assert_close(
        layer.weight.double(), _reference_weight(g, v, 0), rtol=1e-2, atol=1e-2
    )


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: weight_norm(nn.Linear(3, 2), name="kernel"), "kernel"),
        (lambda: weight_norm(nn.Linear(3, 2), dim=2), "out of range"),
        (lambda: weight_norm(nn.ReLU()), "weight"),
    ],
)
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()

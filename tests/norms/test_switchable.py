"""switchable_norm and SwitchableNorm: float64 reference, IN/LN/BN corners, module."""

from __future__ import annotations

import _reference_batch as ref
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from hypothesis import given
from hypothesis import strategies as st

import norms
from norms.functional.switchable import switchable_norm, switchable_norm_reference

SHAPES = [(4, 3, 5), (3, 4, 3, 5), (2, 3, 2, 3, 2)]
IMPLS = [switchable_norm, switchable_norm_reference]


def _rand(gen, *shape, dtype=torch.float32, scale=1.0, offset=0.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + offset).to(dtype)


def _convex(gen, dtype=torch.float32):
    w = torch.rand(3, generator=gen, dtype=torch.float64) + 0.1
    return (w / w.sum()).to(dtype)


def _params(gen, channels, dtype=torch.float32):
    return _rand(gen, channels, scale=0.5, offset=1.0, dtype=dtype), _rand(
        gen, channels, dtype=dtype
    )


def _x(gen, shape, dtype=torch.float32, offset=0.0):
    """Per-sample and per-channel offsets/scales so IN, LN and BN statistics all differ."""
    batch, channels = shape[:2]
    view = (batch, channels) + (1,) * (len(shape) - 2)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    x = x * (torch.rand(view, generator=gen, dtype=torch.float64) * 3 + 0.5)
    return (x + torch.randn(view, generator=gen, dtype=torch.float64) * 2 + offset).to(dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("impl", IMPLS)
def test_training_matches_float64_reference(gen, shape, impl):
    x = _x(gen, shape)
    mean_weight, var_weight = _convex(gen), _convex(gen)
    weight, bias = _params(gen, shape[1])
    running_mean, running_var = torch.zeros(shape[1]), torch.ones(shape[1])

    y = impl(x, mean_weight, var_weight, weight, bias, 1e-5, running_mean, running_var, True, 0.25)

    expected = ref.switchable_norm(x, mean_weight, var_weight, weight, bias)
    torch.testing.assert_close(y.double(), expected, atol=1e-5, rtol=1e-5)
    _, batch_mean, batch_var = ref.batch_norm_train(x)
    torch.testing.assert_close(running_mean.double(), 0.25 * batch_mean)
    torch.testing.assert_close(running_var.double(), 0.75 + 0.25 * batch_var)


@pytest.mark.parametrize("impl", IMPLS)
def test_eval_uses_running_stats_in_the_bn_branch_only(gen, impl):
    x = _x(gen, (3, 4, 6, 5))
    mean_weight, var_weight = _convex(gen), _convex(gen)
    running_mean, running_var = _rand(gen, 4), _rand(gen, 4).abs() + 0.5
    before = running_mean.clone()
    y = impl(x, mean_weight, var_weight, None, None, 1e-5, running_mean, running_var, False)
    expected = ref.switchable_norm(x, mean_weight, var_weight, bn_stats=(running_mean, running_var))
    torch.testing.assert_close(y.double(), expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(running_mean, before)


@given(seed=st.integers(0, 2**16), shape=st.sampled_from(SHAPES), branch=st.sampled_from([0, 1, 2]))
def test_one_hot_weights_are_instance_layer_and_batch_norm(seed, shape, branch):
    gen = torch.Generator().manual_seed(seed)
    x = _x(gen, shape)
    weight, bias = _params(gen, shape[1])
    one_hot = F.one_hot(torch.tensor(branch), 3).float()
    y = switchable_norm(x, one_hot, one_hot, weight, bias)
    affine_view = (1, -1) + (1,) * (x.dim() - 2)
    if branch == 0:
        expected = F.instance_norm(x, weight=weight, bias=bias)
    elif branch == 1:
        expected = F.layer_norm(x, x.shape[1:]) * weight.reshape(affine_view) + bias.reshape(
            affine_view
        )
    else:
        expected = F.batch_norm(x, None, None, weight, bias, training=True)
    torch.testing.assert_close(y, expected, atol=2e-5, rtol=2e-5)


@given(seed=st.integers(0, 2**16), shape=st.sampled_from(SHAPES))
def test_fast_path_equals_reference_composition(seed, shape):
    gen = torch.Generator().manual_seed(seed)
    x = _x(gen, shape, dtype=torch.float64)
    mean_weight, var_weight = _convex(gen, torch.float64), _convex(gen, torch.float64)
    weight, bias = _params(gen, shape[1], torch.float64)
    buffers = [(torch.zeros(shape[1]), torch.ones(shape[1])) for _ in range(2)]
    fast = switchable_norm(x, mean_weight, var_weight, weight, bias, 1e-5, *buffers[0])
    plain = switchable_norm_reference(x, mean_weight, var_weight, weight, bias, 1e-5, *buffers[1])
    torch.testing.assert_close(fast, plain, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(buffers[0][1], buffers[1][1])


@pytest.mark.parametrize(
    ("dtype", "noise", "atol"), [(torch.float32, 1.0, 1e-2), (torch.bfloat16, 128.0, 4e-2)]
)
def test_large_common_offset(gen, dtype, noise, atol):
    x = (torch.randn(4, 3, 8, 8, generator=gen, dtype=torch.float64) * noise + 1e4).to(dtype)
    mean_weight, var_weight = _convex(gen), _convex(gen)
    y = switchable_norm(x, mean_weight, var_weight)
    assert y.dtype == dtype
    expected = ref.switchable_norm(x, mean_weight, var_weight)
    torch.testing.assert_close(y.double(), expected, atol=atol, rtol=0)


@pytest.mark.parametrize("training", [True, False])
def test_gradcheck_fast_path(gen, training):
    x = _x(gen, (3, 2, 4), dtype=torch.float64).requires_grad_()
    mean_weight = _convex(gen, torch.float64).requires_grad_()
    var_weight = _convex(gen, torch.float64).requires_grad_()
    weight, bias = (p.requires_grad_() for p in _params(gen, 2, torch.float64))
    running_mean = torch.tensor([0.2, -0.3], dtype=torch.float64)
    running_var = torch.tensor([1.5, 0.8], dtype=torch.float64)

    def fn(x, mw, vw, w, b):
        return switchable_norm(
            x, mw, vw, w, b, 1e-5, running_mean.clone(), running_var.clone(), training
        )

    assert torch.autograd.gradcheck(fn, (x, mean_weight, var_weight, weight, bias))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: switchable_norm(torch.randn(4, 3), torch.ones(3) / 3, torch.ones(3) / 3),
            "spatial",
        ),
        (
            lambda: switchable_norm(torch.randn(4, 3, 1), torch.ones(3) / 3, torch.ones(3) / 3),
            "spatial",
        ),
        (
            lambda: switchable_norm(torch.randn(4, 3, 5), torch.ones(2), torch.ones(3)),
            "mean_weight",
        ),
        (
            lambda: switchable_norm(torch.randn(4, 3, 5), torch.ones(3), torch.ones(3, 1)),
            "var_weight",
        ),
        (
            lambda: switchable_norm(
                torch.randn(4, 3, 5), torch.ones(3), torch.ones(3), training=False
            ),
            "running",
        ),
        (
            lambda: switchable_norm(
                torch.randn(4, 3, 5), torch.ones(3), torch.ones(3), weight=torch.ones(2)
            ),
            "weight",
        ),
    ],
)
def test_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --------------------------------------------------------------------------- module


def test_module_uses_softmax_of_its_logits_and_learns_them(gen):
    layer = norms.build("switchable", 3)
    assert isinstance(layer, norms.SwitchableNorm)
    with torch.no_grad():
        layer.mean_logits.copy_(torch.tensor([0.5, -1.0, 2.0]))
        layer.var_logits.copy_(torch.tensor([-0.3, 0.0, 1.0]))
    x = _x(gen, (4, 3, 5, 2))
    y = layer(x)
    expected = ref.switchable_norm(x, layer.mean_logits.softmax(0), layer.var_logits.softmax(0))
    torch.testing.assert_close(y.double(), expected, atol=1e-5, rtol=1e-5)
    (y * torch.randn(y.shape, generator=gen)).sum().backward()
    assert layer.mean_logits.grad.abs().sum() > 0 and layer.var_logits.grad.abs().sum() > 0


def test_module_train_eval_and_state_dict(gen):
    layer = norms.SwitchableNorm(3, momentum=None)
    for step in range(3):
        layer(_x(gen, (4, 3, 6), offset=float(step)))
    assert int(layer.num_batches_tracked) == 3
    copy = norms.SwitchableNorm(3)
    copy.load_state_dict(layer.state_dict())
    layer.eval()
    copy.eval()
    x = _x(gen, (2, 3, 6))
    torch.testing.assert_close(copy(x), layer(x), atol=0, rtol=0)
    weights = layer.branch_weights()
    expected = ref.switchable_norm(x, *weights, bn_stats=(layer.running_mean, layer.running_var))
    torch.testing.assert_close(layer(x).double(), expected, atol=1e-5, rtol=1e-5)
    assert int(layer.num_batches_tracked) == 3


def test_module_without_running_stats_uses_batch_moments_in_eval(gen):
    layer = norms.SwitchableNorm(3, track_running_stats=False).eval()
    x = _x(gen, (4, 3, 5))
    expected = ref.switchable_norm(x, *layer.branch_weights())
    torch.testing.assert_close(layer(x).double(), expected, atol=1e-5, rtol=1e-5)


def test_module_reset_and_errors(gen):
    layer = norms.SwitchableNorm(3)
    with torch.no_grad():
        layer.mean_logits.fill_(3.0)
        layer.weight.fill_(2.0)
    layer.reset_parameters()
    assert torch.equal(layer.mean_logits, torch.zeros(3)) and torch.equal(
        layer.weight, torch.ones(3)
    )
    with pytest.raises(ValueError):
        norms.SwitchableNorm(0)
    with pytest.raises(ValueError):
        layer(torch.randn(4, 3))
    with pytest.raises(ValueError):
        layer(torch.randn(4, 2, 5))

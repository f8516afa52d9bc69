"""Ghost batch norm and batch renorm: float64 references, equivalences with BN, modules."""

from __future__ import annotations

import _reference_batch as ref
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import norms
from norms.functional import batch as fb

SHAPES = [(8, 3), (4, 2, 5), (6, 3, 2, 3)]


def _rand(gen, *shape, dtype=torch.float32, scale=1.0, offset=0.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + offset).to(dtype)


def _params(gen, channels, dtype=torch.float32):
    return _rand(gen, channels, scale=0.5, offset=1.0, dtype=dtype), _rand(
        gen, channels, dtype=dtype
    )


# --------------------------------------------------------------------------- ghost


@pytest.mark.parametrize("virtual_batch_size", [2, 4])
def test_ghost_matches_per_virtual_batch_reference(gen, virtual_batch_size):
    x = _rand(gen, 8, 3, 5, scale=2.0)
    x[4:] += 10.0  # virtual batches with very different statistics
    weight, bias = _params(gen, 3)
    running_mean, running_var = torch.zeros(3), torch.ones(3)
    y = fb.ghost_batch_norm(
        x, virtual_batch_size, running_mean, running_var, weight, bias, True, 0.2
    )
    y_ref, mean, var = ref.ghost_batch_norm_train(x, virtual_batch_size, weight, bias)
    torch.testing.assert_close(y.double(), y_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(running_mean.double(), 0.2 * mean)
    torch.testing.assert_close(running_var.double(), 0.8 + 0.2 * var)


@given(seed=st.integers(0, 2**16), shape=st.sampled_from(SHAPES), oversize=st.integers(0, 3))
def test_one_virtual_batch_is_batch_norm(seed, shape, oversize):
    gen = torch.Generator().manual_seed(seed)
    x = _rand(gen, *shape, scale=3.0, offset=1.0)
    weight, bias = _params(gen, shape[1])
    buffers = [(torch.zeros(shape[1]), torch.ones(shape[1])) for _ in range(2)]
    ghost = fb.ghost_batch_norm(x, shape[0] + oversize, *buffers[0], weight, bias)
    plain = fb.batch_norm(x, *buffers[1], weight, bias)
    torch.testing.assert_close(ghost, plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(buffers[0][0], buffers[1][0])
    torch.testing.assert_close(buffers[0][1], buffers[1][1])


def test_ghost_bfloat16_accumulates_in_float32(gen):
    x = _rand(gen, 8, 2, 16, scale=64.0, offset=1e3, dtype=torch.bfloat16)
    y = fb.ghost_batch_norm(x, 4)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.double(), ref.ghost_batch_norm_train(x, 4)[0], atol=4e-2, rtol=0)


def test_ghost_gradcheck(gen):
    x = _rand(gen, 6, 2, 3, dtype=torch.float64).requires_grad_()
    weight, bias = (p.requires_grad_() for p in _params(gen, 2, torch.float64))
    assert torch.autograd.gradcheck(
        lambda x, w, b: fb.ghost_batch_norm(x, 3, None, None, w, b), (x, weight, bias)
    )


def test_ghost_eval_is_batch_norm_with_running_stats(gen):
    x = _rand(gen, 8, 3)
    running_mean, running_var = _rand(gen, 3), _rand(gen, 3).abs() + 0.5
    y = fb.ghost_batch_norm(x, 2, running_mean, running_var, training=False)
    torch.testing.assert_close(y.double(), ref.batch_norm_eval(x, running_mean, running_var))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: fb.ghost_batch_norm(torch.randn(6, 3), 4), "divide"),
        (lambda: fb.ghost_batch_norm(torch.randn(6, 3), 0), "positive"),
        (lambda: fb.ghost_batch_norm(torch.randn(6, 3), 1), "more than 1 value"),
        (lambda: fb.ghost_batch_norm(torch.randn(6, 3), 2, training=False), "running_mean"),
    ],
)
def test_ghost_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_ghost_module(gen):
    layer = norms.build("ghost_batch", 3, virtual_batch_size=2)
    assert isinstance(layer, norms.GhostBatchNorm)
    x = _rand(gen, 4, 3, 5, offset=2.0)
    y = layer(x)
    y_ref, mean, var = ref.ghost_batch_norm_train(x, 2)
    torch.testing.assert_close(y.double(), y_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer.running_mean.double(), 0.1 * mean)
    copy = norms.GhostBatchNorm(3, virtual_batch_size=2)
    copy.load_state_dict(layer.state_dict())
    layer.eval()
    copy.eval()
    torch.testing.assert_close(copy(x), layer(x), atol=0, rtol=0)
    torch.testing.assert_close(
        layer(x).double(), ref.batch_norm_eval(x, layer.running_mean, layer.running_var)
    )
    assert "virtual_batch_size=2" in repr(layer)
    with pytest.raises(ValueError):
        norms.GhostBatchNorm(3, virtual_batch_size=1)


# --------------------------------------------------------------------------- renorm


@pytest.mark.parametrize("shape", SHAPES)
def test_renorm_matches_reference_with_active_clipping(gen, shape):
    channels = shape[1]
    x = _rand(gen, *shape, scale=4.0, offset=3.0)
    weight, bias = _params(gen, channels)
    # running stats far from the batch's so r and d both clip
    running_mean, running_var = torch.full((channels,), -5.0), torch.full((channels,), 0.25)
    expected_y, r, d = ref.batch_renorm_train(x, running_mean, running_var, 2.0, 1.5, weight, bias)
    assert (r == 2.0).any() and (d.abs() == 1.5).any()
    _, batch_mean, batch_var = ref.batch_norm_train(x)
    expected_mean = 0.9 * running_mean.double() + 0.1 * batch_mean
    expected_var = 0.9 * running_var.double() + 0.1 * batch_var

    y = fb.batch_renorm(x, running_mean, running_var, weight, bias, True, 0.1, 1e-5, 2.0, 1.5)

    torch.testing.assert_close(y.double(), expected_y, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(running_mean.double(), expected_mean)
    torch.testing.assert_close(running_var.double(), expected_var)


@given(seed=st.integers(0, 2**16), shape=st.sampled_from(SHAPES))
def test_renorm_without_room_is_batch_norm(seed, shape):
    gen = torch.Generator().manual_seed(seed)
    channels = shape[1]
    x = _rand(gen, *shape, scale=2.0, offset=-1.0)
    weight, bias = _params(gen, channels)
    start_mean, start_var = _rand(gen, channels), _rand(gen, channels).abs() + 0.1
    renorm_buffers = start_mean.clone(), start_var.clone()
    bn_buffers = start_mean.clone(), start_var.clone()
    renormed = fb.batch_renorm(x, *renorm_buffers, weight, bias, r_max=1.0, d_max=0.0)
    plain = fb.batch_norm(x, *bn_buffers, weight, bias)
    torch.testing.assert_close(renormed, plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(renorm_buffers[0], bn_buffers[0])
    torch.testing.assert_close(renorm_buffers[1], bn_buffers[1])


def test_renorm_r_and_d_carry_no_gradient(gen):
    """The gradient equals that of the formula with r and d frozen as constants."""
    x = _rand(gen, 6, 2, 3, dtype=torch.float64, scale=2.0, offset=1.0).requires_grad_()
    running_mean = torch.tensor([0.3, -0.4], dtype=torch.float64)
    running_var = torch.tensor([0.5, 2.0], dtype=torch.float64)
    y = fb.batch_renorm(x, running_mean.clone(), running_var.clone(), r_max=3.0, d_max=5.0)
    (grad,) = torch.autograd.grad((y**3).sum(), x)

    _, r, d = ref.batch_renorm_train(x, running_mean, running_var, 3.0, 5.0)
    mean = x.mean((0, 2), keepdim=True)
    std = torch.sqrt(x.var((0, 2), correction=0, keepdim=True) + 1e-5)
    frozen = (x - mean) / std * r.reshape(1, -1, 1) + d.reshape(1, -1, 1)
    (expected,) = torch.autograd.grad((frozen**3).sum(), x)
    torch.testing.assert_close(grad, expected)


def test_renorm_gradcheck(gen):
    x = _rand(gen, 5, 2, 3, dtype=torch.float64, scale=2.0).requires_grad_()
    weight, bias = (p.requires_grad_() for p in _params(gen, 2, torch.float64))
    running_mean = torch.tensor([0.5, -0.5], dtype=torch.float64)
    running_var = torch.tensor([0.7, 1.5], dtype=torch.float64)

    def fn(x, w, b):  # fresh buffers each call so every evaluation sees the same r, d
        return fb.batch_renorm(
            x, running_mean.clone(), running_var.clone(), w, b, r_max=1.2, d_max=0.3
        )

    assert torch.autograd.gradcheck(fn, (x, weight, bias))


def test_renorm_eval_is_batch_norm_with_running_stats(gen):
    x = _rand(gen, 4, 3, 2)
    running_mean, running_var = _rand(gen, 3), _rand(gen, 3).abs() + 0.5
    y = fb.batch_renorm(x, running_mean, running_var, training=False)
    torch.testing.assert_close(y.double(), ref.batch_norm_eval(x, running_mean, running_var))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: fb.batch_renorm(torch.randn(4, 3), None, None), "needs running_mean"),
        (
            lambda: fb.batch_renorm(torch.randn(4, 3), torch.zeros(3), torch.ones(3), r_max=0.5),
            "r_max",
        ),
        (
            lambda: fb.batch_renorm(torch.randn(4, 3), torch.zeros(3), torch.ones(3), d_max=-1),
            "d_max",
        ),
        (lambda: fb.batch_renorm(torch.randn(1, 3), torch.zeros(3), torch.ones(3)), "more than 1"),
    ],
)
def test_renorm_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_renorm_module(gen):
    layer = norms.build("batch_renorm", 3, r_max=1.0, d_max=0.0, momentum=None)
    plain = norms.BatchNorm(3, momentum=None)
    for step in range(3):
        x = _rand(gen, 4, 3, 5, scale=1.0 + step, offset=step)
        torch.testing.assert_close(layer(x), plain(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer.running_var, plain.running_var)
    assert int(layer.num_batches_tracked) == 3
    copy = norms.BatchRenorm(3)
    copy.load_state_dict(layer.state_dict())
    for module in (layer, copy, plain):
        module.eval()
    torch.testing.assert_close(copy(x), plain(x), atol=1e-6, rtol=1e-6)
    assert "r_max=1.0" in repr(layer)
    for kwargs in ({"r_max": 0.9}, {"d_max": -0.1}, {"eps": -1.0}):
        with pytest.raises(ValueError):
            norms.BatchRenorm(3, **kwargs)

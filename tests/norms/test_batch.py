"""batch_norm, batch_norm_eval_mix and BatchNorm: float64 references, torch, numerics, module."""

from __future__ import annotations

import _reference_batch as ref
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import norms
from norms.functional import batch as fb

SHAPES = [(6, 3), (4, 3, 7), (3, 2, 5, 4), (2, 3, 3, 4, 2)]


def _rand(gen, *shape, dtype=torch.float32, scale=1.0, offset=0.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + offset).to(dtype)


def _params(gen, channels):
    weight = _rand(gen, channels, scale=0.5, offset=1.0)
    bias = _rand(gen, channels)
    return weight, bias


# --------------------------------------------------------------------------- function


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("impl", [fb.batch_norm, fb._batch_norm_reference])
def test_train_output_and_buffers_match_float64_reference(gen, shape, impl):
    x = _rand(gen, *shape, scale=2.0, offset=0.5)
    weight, bias = _params(gen, shape[1])
    running_mean, running_var = _rand(gen, shape[1]), _rand(gen, shape[1]).abs() + 0.5
    expected_mean = (1 - 0.3) * running_mean.double()
    expected_var = (1 - 0.3) * running_var.double()

    y = impl(x, running_mean, running_var, weight, bias, True, 0.3, 1e-5)

    y_ref, batch_mean, batch_var_unbiased = ref.batch_norm_train(x, weight, bias)
    torch.testing.assert_close(y.double(), y_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(running_mean.double(), expected_mean + 0.3 * batch_mean)
    torch.testing.assert_close(running_var.double(), expected_var + 0.3 * batch_var_unbiased)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("impl", [fb.batch_norm, fb._batch_norm_reference])
def test_eval_uses_running_stats_and_leaves_them(gen, shape, impl):
    x = _rand(gen, *shape)
    weight, bias = _params(gen, shape[1])
    running_mean, running_var = _rand(gen, shape[1]), _rand(gen, shape[1]).abs() + 0.5
    before = running_mean.clone(), running_var.clone()
    y = impl(x, running_mean, running_var, weight, bias, training=False)
    expected = ref.batch_norm_eval(x, running_mean, running_var, weight, bias)
    torch.testing.assert_close(y.double(), expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(running_mean, before[0]) and torch.equal(running_var, before[1])


def test_batch_stats_without_buffers(gen):
    x = _rand(gen, 5, 4, 3)
    torch.testing.assert_close(fb.batch_norm(x).double(), ref.batch_norm_train(x)[0])


@pytest.mark.parametrize(
    ("dtype", "noise", "atol"),
    [(torch.float32, 1.0, 1e-2), (torch.float16, 8.0, 1e-2), (torch.bfloat16, 128.0, 4e-2)],
)
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("impl", [fb.batch_norm, fb._batch_norm_reference])
def test_large_common_offset_normalises_correctly(gen, dtype, noise, atol, channels_last, impl):
    """1e4 + noise: a one-pass E[x^2] - E[x]^2 in float32 would lose the variance entirely.

    The noise is scaled to stay representable next to 1e4 in the dtype (its spacing there
    is 1e-3 / 8 / 64 for float32 / float16 / bfloat16); the reference sees the same
    rounded inputs.
    """
    x = _rand(gen, 8, 3, 16, 16, scale=noise, offset=1e4, dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    running_mean, running_var = torch.zeros(3), torch.ones(3)
    y = impl(x, running_mean, running_var, momentum=1.0)
    assert y.dtype == dtype
    y_ref, batch_mean, batch_var = ref.batch_norm_train(x)
    torch.testing.assert_close(y.double(), y_ref, atol=atol, rtol=0)
    torch.testing.assert_close(running_mean.double(), batch_mean, atol=1e-2, rtol=0)
    torch.testing.assert_close(running_var.double(), batch_var, rtol=1e-3, atol=0)


def test_mixed_dtypes_take_the_reference_path(gen):
    """bf16 input with bf16 affine but float32 buffers: torch's kernel refuses; we do not."""
    x = _rand(gen, 6, 3, 5, scale=3.0, offset=100.0, dtype=torch.bfloat16)
    weight, bias = (p.to(torch.bfloat16) for p in _params(gen, 3))
    running_mean, running_var = torch.zeros(3), torch.ones(3)
    assert not fb._native_ok(x, running_mean, running_var, weight, bias)
    y = fb.batch_norm(x, running_mean, running_var, weight, bias)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(
        y.double(), ref.batch_norm_train(x, weight, bias)[0], atol=3e-2, rtol=2e-2
    )


def test_reference_path_gradients(gen):
    """The reference path's autograd backward: gradcheck, and equal to torch's kernel."""
    x = _rand(gen, 4, 3, 5, dtype=torch.float64).requires_grad_()
    weight, bias = (p.double().requires_grad_() for p in _params(gen, 3))
    assert torch.autograd.gradcheck(
        lambda x, w, b: fb._batch_norm_reference(x, None, None, w, b), (x, weight, bias)
    )
    grads = torch.autograd.grad(
        (fb._batch_norm_reference(x, None, None, weight, bias) ** 3).sum(), (x, weight, bias)
    )
    native = torch.autograd.grad(
        (nn.functional.batch_norm(x, None, None, weight, bias, True) ** 3).sum(), (x, weight, bias)
    )
    for ours, theirs in zip(grads, native, strict=True):
        torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: fb.batch_norm(torch.randn(1, 3)), "more than 1 value"),
        (lambda: fb.batch_norm(torch.randn(1, 3, 1, 1)), "more than 1 value"),
        (lambda: fb.batch_norm(torch.randn(4, 3), training=False), "needs running_mean"),
        (lambda: fb.batch_norm(torch.randn(4)), "at least 2 dims"),
        (lambda: fb.batch_norm(torch.randn(4, 3), torch.zeros(3), None), "together"),
        (lambda: fb.batch_norm(torch.randn(4, 3), torch.zeros(2), torch.ones(2)), "shape"),
        (lambda: fb.batch_norm(torch.randn(4, 3), weight=torch.ones(4)), "weight"),
        (
            lambda: fb.batch_norm(torch.randn(4, 3), torch.zeros(3), torch.ones(3), momentum=2),
            "momentum",
        ),
        (
            lambda: fb.batch_norm(torch.randn(4, 3), torch.zeros(3), torch.ones(3), momentum=None),
            "momentum",
        ),
        (lambda: fb.batch_norm(torch.randn(4, 3), eps=0.0), "eps"),
        (
            lambda: fb.batch_norm_eval_mix(torch.randn(4, 3), torch.zeros(3), torch.ones(3), 1.5),
            "mix",
        ),
    ],
)
def test_bad_arguments_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --------------------------------------------------------------------------- eval_mix


@given(
    mix=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
    shape=st.sampled_from(SHAPES),
)
def test_eval_mix_matches_the_papers_formula(mix, seed, shape):
    gen = torch.Generator().manual_seed(seed)
    x = _rand(gen, *shape, dtype=torch.float64, scale=2.0, offset=1.0)
    weight, bias = (p.double() for p in _params(gen, shape[1]))
    running_mean = _rand(gen, shape[1], dtype=torch.float64)
    running_var = _rand(gen, shape[1], dtype=torch.float64).abs() + 0.2
    y = fb.batch_norm_eval_mix(x, running_mean, running_var, mix, weight, bias)
    expected = ref.eval_mix(x, running_mean, running_var, mix, weight, bias)
    torch.testing.assert_close(y, expected, atol=1e-9, rtol=1e-9)


@given(seed=st.integers(0, 2**16), shape=st.sampled_from(SHAPES))
def test_eval_mix_zero_is_plain_eval_batch_norm(seed, shape):
    gen = torch.Generator().manual_seed(seed)
    x = _rand(gen, *shape, scale=3.0)
    weight, bias = _params(gen, shape[1])
    running_mean, running_var = _rand(gen, shape[1]), _rand(gen, shape[1]).abs() + 0.1
    mixed = fb.batch_norm_eval_mix(x, running_mean, running_var, 0.0, weight, bias)
    plain = fb.batch_norm(x, running_mean, running_var, weight, bias, training=False)
    torch.testing.assert_close(mixed, plain, atol=1e-6, rtol=1e-6)


def test_eval_mix_one_is_batch_statistics_without_updating(gen):
    x = _rand(gen, 6, 3, 4, scale=2.0, offset=-1.0)
    running_mean, running_var = torch.full((3,), 5.0), torch.full((3,), 9.0)
    y = fb.batch_norm_eval_mix(x, running_mean, running_var, 1.0)
    torch.testing.assert_close(y, fb.batch_norm(x), atol=1e-6, rtol=1e-6)
    assert torch.equal(running_mean, torch.full((3,), 5.0))
    assert torch.equal(running_var, torch.full((3,), 9.0))


def test_eval_mix_with_a_large_offset_in_float32(gen):
    """The naive E[x^2] - mu^2 in float32 cancels catastrophically around 1e8."""
    x = _rand(gen, 8, 3, 8, 8, offset=1e4)
    running_mean, running_var = torch.full((3,), 1e4 + 0.5), torch.full((3,), 2.0)
    y = fb.batch_norm_eval_mix(x, running_mean, running_var, 0.3)
    expected = ref.eval_mix(x, running_mean, running_var, 0.3)
    torch.testing.assert_close(y.double(), expected, atol=1e-2, rtol=0)


def test_eval_mix_gradcheck(gen):
    x = _rand(gen, 4, 2, 3, dtype=torch.float64).requires_grad_()
    weight, bias = (p.double().requires_grad_() for p in _params(gen, 2))
    running_mean, running_var = (
        torch.zeros(2, dtype=torch.float64),
        torch.ones(2, dtype=torch.float64),
    )
    assert torch.autograd.gradcheck(
        lambda x, w, b: fb.batch_norm_eval_mix(x, running_mean, running_var, 0.4, w, b),
        (x, weight, bias),
    )


# --------------------------------------------------------------------------- vs torch


TORCH_CASES = [
    (nn.BatchNorm1d, (6, 3)),
    (nn.BatchNorm1d, (4, 3, 5)),
    (nn.BatchNorm2d, (3, 3, 4, 5)),
    (nn.BatchNorm3d, (2, 3, 3, 4, 2)),
]


@pytest.mark.parametrize(("torch_cls", "shape"), TORCH_CASES)
@pytest.mark.parametrize("momentum", [0.1, None])
def test_module_matches_torch_over_several_steps(gen, torch_cls, shape, momentum):
    ours = norms.BatchNorm(shape[1], momentum=momentum)
    theirs = torch_cls(shape[1], momentum=momentum)
    with torch.no_grad():
        for module in (ours, theirs):
            module.weight.copy_(torch.tensor([0.5, 1.5, 2.0]))
            module.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    for step in range(4):
        x = _rand(gen, *shape, scale=1.0 + step, offset=float(step)).requires_grad_()
        y_ours, y_theirs = ours(x), theirs(x)
        torch.testing.assert_close(y_ours, y_theirs, atol=1e-5, rtol=1e-5)
        g_ours = torch.autograd.grad((y_ours**2).sum(), (x, ours.weight, ours.bias))
        g_theirs = torch.autograd.grad((y_theirs**2).sum(), (x, theirs.weight, theirs.bias))
        for a, b in zip(g_ours, g_theirs, strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.running_mean, theirs.running_mean)
    torch.testing.assert_close(ours.running_var, theirs.running_var)
    assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == 4
    ours.eval()
    theirs.eval()
    x = _rand(gen, *shape)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-5)


def test_momentum_none_is_the_cumulative_average(gen):
    layer = norms.BatchNorm(2, momentum=None)
    batches = [_rand(gen, 5, 2, 3, scale=1.0 + i, offset=i) for i in range(3)]
    for x in batches:
        layer(x)
    stats = [ref.batch_norm_train(x)[1:] for x in batches]
    torch.testing.assert_close(
        layer.running_mean.double(), torch.stack([m for m, _ in stats]).mean(0)
    )
    torch.testing.assert_close(
        layer.running_var.double(), torch.stack([v for _, v in stats]).mean(0)
    )


def test_without_running_stats_matches_torch_in_both_modes(gen):
    ours = norms.BatchNorm(3, track_running_stats=False)
    theirs = nn.BatchNorm2d(3, track_running_stats=False)
    assert ours.running_mean is None and ours.running_sq_mean is None
    x = _rand(gen, 4, 3, 2, 2, offset=2.0)
    for mode in (True, False):
        ours.train(mode)
        theirs.train(mode)
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- module


def test_state_dict_round_trip_and_torch_compatibility(gen):
    layer = norms.BatchNorm(3, eval_mix=0.25)
    for _ in range(3):
        layer(_rand(gen, 4, 3, 5, offset=1.0))
    copy = norms.BatchNorm(3, eval_mix=0.25)
    copy.load_state_dict(layer.state_dict())
    layer.eval()
    copy.eval()
    x = _rand(gen, 4, 3, 5)
    torch.testing.assert_close(copy(x), layer(x), atol=0, rtol=0)
    theirs = nn.BatchNorm1d(3)
    theirs.load_state_dict(layer.state_dict())
    ours = norms.BatchNorm(3)
    ours.load_state_dict(theirs.state_dict())
    theirs.eval()
    ours.eval()
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)


def test_train_eval_switching(gen):
    layer = norms.BatchNorm(3)
    x = _rand(gen, 6, 3, 4, offset=3.0)
    layer(x)
    snapshot = {k: v.clone() for k, v in layer.state_dict().items()}
    layer.eval()
    y_eval = layer(x)
    assert all(torch.equal(v, layer.state_dict()[k]) for k, v in snapshot.items())
    torch.testing.assert_close(
        y_eval.double(),
        ref.batch_norm_eval(x, layer.running_mean, layer.running_var),
        atol=1e-5,
        rtol=1e-5,
    )
    layer.train()
    layer(x)
    assert int(layer.num_batches_tracked) == 2


def test_module_eval_mix_and_running_sq_mean(gen):
    layer = norms.BatchNorm(3, eval_mix=0.5)
    plain = norms.BatchNorm(3)
    for _ in range(2):
        x = _rand(gen, 5, 3, 4, offset=2.0)
        torch.testing.assert_close(layer(x), plain(x))  # eval_mix does not touch training
    torch.testing.assert_close(layer.running_sq_mean, layer.running_var + layer.running_mean**2)
    layer.eval()
    x = _rand(gen, 5, 3, 4, scale=2.0)
    expected = ref.eval_mix(x, layer.running_mean, layer.running_var, 0.5)
    torch.testing.assert_close(layer(x).double(), expected, atol=1e-5, rtol=1e-5)
    assert "eval_mix=0.5" in repr(layer)


def test_reset_parameters(gen):
    layer = norms.BatchNorm(3)
    layer(_rand(gen, 4, 3, offset=5.0))
    with torch.no_grad():
        layer.weight.mul_(3)
        layer.bias.add_(1)
    layer.reset_parameters()
    assert torch.equal(layer.running_mean, torch.zeros(3))
    assert torch.equal(layer.running_var, torch.ones(3))
    assert int(layer.num_batches_tracked) == 0
    assert torch.equal(layer.weight, torch.ones(3)) and torch.equal(layer.bias, torch.zeros(3))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_features": 0},
        {"num_features": 3, "eps": 0.0},
        {"num_features": 3, "momentum": 1.5},
        {"num_features": 3, "eval_mix": -0.1},
        {"num_features": 3, "eval_mix": 0.5, "track_running_stats": False},
    ],
)
def test_module_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        norms.BatchNorm(**kwargs)


def test_module_rejects_wrong_channel_count():
    with pytest.raises(ValueError, match="expected"):
        norms.BatchNorm(3)(torch.randn(4, 2, 5))


def test_registry_builds_batch_norm():
    assert "batch" in norms.available()
    layer = norms.build("batch", 7, momentum=None)
    assert isinstance(layer, norms.BatchNorm) and layer.momentum is None
    assert layer.weight.shape == (7,)

"""Batch normalization and the members that share its statistics over the batch.

* :func:`batch_norm` - the contract function: statistics over every dim but 1.
* :func:`batch_norm_eval_mix` - Summers & Dinneen's inference-time correction that mixes
  the current batch's moments with the running ones.
* :func:`ghost_batch_norm` - statistics per virtual sub-batch (Hoffer et al., 2017).
* :func:`batch_renorm` - the r/d corrected form (Ioffe, 2017).

Statistics are accumulated in float32 (float64 for float64 inputs) with the two-pass
moments of :mod:`norms.functional._stats`; outputs come back in the input dtype. The
private helpers here (running-stat update, normalisation, checks) are shared with the
sequence and switchable members.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

from norms.functional import _args
from norms.functional._stats import acc_dtype, moments

__all__ = ["batch_norm", "batch_norm_eval_mix", "batch_renorm", "ghost_batch_norm"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


# --------------------------------------------------------------------------- helpers


def _check_rank(x: Tensor, min_dim: int = 2) -> None:
    if x.dim() < min_dim:
        raise ValueError(
            f"expected an input with channels at dim 1 and at least {min_dim} dims, "
            f"got shape {tuple(x.shape)}"
        )


def _check_momentum(momentum: float | None) -> None:
    _args.momentum(momentum, allow_none=False)


def _check_eps(eps: float) -> None:
    _args.eps(eps, positive=True)


def _check_values_per_channel(count: int, shape: Sequence[int]) -> None:
    if count <= 1:
        raise ValueError(
            f"expected more than 1 value per channel when training, got input of shape "
            f"{tuple(shape)}"
        )


def _channel_view(t: Tensor, x: Tensor) -> Tensor:
    """A ``(C,)`` tensor viewed as ``(1, C, 1, ..., 1)`` to broadcast against ``x``."""
    return t.reshape((1, -1) + (1,) * (x.dim() - 2))


def _reduce_dims(x: Tensor) -> tuple[int, ...]:
    """Every dim but the channel dim 1."""
    return (0, *range(2, x.dim()))


def _update_running_stats(
    running_mean: Tensor | None,
    running_var: Tensor | None,
    mean: Tensor,
    var: Tensor,
    count: int | Tensor,
    momentum: float,
) -> None:
    """In place: ``r <- (1 - m) r + m * s`` with the *unbiased* variance ``var * n / (n - 1)``.

    Args:
        running_mean, running_var: buffers updated in place (either may be ``None``).
        mean, var: the batch mean and biased variance, broadcastable to the buffers.
        count: ``n``, the number of values each statistic was reduced over.
        momentum: ``m``.
    """
    with torch.no_grad():
        if running_mean is not None:
            running_mean.lerp_(mean.detach().to(running_mean.dtype), momentum)
        if running_var is not None:
            unbiased = var.detach() * (count / (count - 1))
            running_var.lerp_(unbiased.to(running_var.dtype), momentum)


def _update_from_batch(
    running_mean: Tensor | None,
    running_var: Tensor | None,
    mean: Tensor,
    var: Tensor,
    x: Tensor,
    momentum: float,
) -> None:
    """:func:`_update_running_stats` with the per-channel moments of ``x`` over every dim
    but 1, in any broadcastable shape (``n = x.numel() / C``)."""
    count = x.numel() // x.shape[1]
    _update_running_stats(running_mean, running_var, mean.flatten(), var.flatten(), count, momentum)


def _running_view(
    running_mean: Tensor, running_var: Tensor, x: Tensor, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """The ``(C,)`` running statistics in ``dtype``, viewed to broadcast against ``x``."""
    return _channel_view(running_mean.to(dtype), x), _channel_view(running_var.to(dtype), x)


def _normalize(
    x: Tensor,
    mean: Tensor,
    var: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` in the accumulation dtype.

    ``mean`` and ``var`` broadcast against ``x``; ``weight``/``bias`` are per channel
    ``(C,)``. The result is returned in ``x.dtype``. The subtraction comes first so a
    large common offset cancels exactly before any scaling.
    """
    work = acc_dtype(x.dtype)
    y = (x.to(work) - mean.to(work)) * torch.rsqrt(var.to(work) + eps)
    return _affine(y, weight, bias).to(x.dtype)


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """``y * weight + bias`` with per-channel ``(C,)`` parameters, in ``y.dtype``."""
    if weight is not None:
        y = y * _channel_view(weight.to(y.dtype), y)
    if bias is not None:
        y = y + _channel_view(bias.to(y.dtype), y)
    return y


def _check_batch_norm_args(
    x: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    training: bool,
    momentum: float | None,
    eps: float,
) -> None:
    _check_rank(x)
    _check_eps(eps)
    channels = x.shape[1]
    _args.shapes(
        (channels,), running_mean=running_mean, running_var=running_var, weight=weight, bias=bias
    )
    _args.running_stats(running_mean, running_var, required=not training)
    if training:
        _check_values_per_channel(x.numel() // max(channels, 1), x.shape)
        _check_momentum(momentum)


def _native_ok(x: Tensor, *tensors: Tensor | None) -> bool:
    """Whether ``F.batch_norm`` computes what the reference does for these dtypes.

    torch's kernels accumulate half/bfloat16 inputs in float32, but they apply the
    normalisation as a per-channel affine ``x * a + b`` with ``a``, ``b`` in float32 only
    when given float32 parameters or buffers ("mixed type"); with half/bfloat16 ones, or
    none, ``b = beta - mean * a`` is rounded to the input's precision and a common offset
    is lost (bfloat16, 100 + N(0, 1): errors far beyond bf16 rounding;
    ``benchmarks/gpu_check.py``'s numerics measure it). Those, and mixes of other dtypes, go
    through the reference path.
    """
    present = [t for t in tensors if t is not None]
    if not x.is_floating_point() or any(t.device != x.device for t in present):
        return False
    dtypes = {t.dtype for t in present}
    if x.dtype in _LOW_PRECISION:
        return dtypes == {torch.float32}
    return dtypes <= {x.dtype}


# --------------------------------------------------------------------------- batch norm


def _batch_norm_reference(
    x: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """:func:`batch_norm` written out: two-pass moments, explicit update, autograd backward.

    Used where torch's kernel does not apply (mixed dtypes) and by the tests that check
    the fast path against it. Same arguments and checks as :func:`batch_norm`.
    """
    _check_batch_norm_args(x, running_mean, running_var, weight, bias, training, momentum, eps)
    if training:
        mean, var = moments(x, _reduce_dims(x))
        _update_from_batch(running_mean, running_var, mean, var, x, momentum)
    else:
        assert running_mean is not None and running_var is not None  # checked above
        mean, var = _running_view(running_mean, running_var, x, acc_dtype(x.dtype))
    return _normalize(x, mean, var, weight, bias, eps)


def batch_norm(
    x: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch normalization (Ioffe & Szegedy, 2015) over every dim but the channel dim 1.

    .. math::
        y = \\frac{x - \\mu_c}{\\sqrt{\\sigma_c^2 + \\epsilon}} \\gamma_c + \\beta_c

    In training ``mu``/``sigma^2`` are the batch mean and biased variance per channel, and
    the running buffers (if given) are updated in place,
    ``r <- (1 - momentum) r + momentum * s``, with the *unbiased* variance as torch does.
    In evaluation the running buffers are used.

    The fast path is ``torch.nn.functional.batch_norm``, whose kernels accumulate in
    float32 for half/bfloat16 inputs and handle a large common offset (checked in the
    tests against a float64 reference); other dtype mixes take the two-pass reference.

    Args:
        x: input with channels at dim 1.
        running_mean, running_var: ``(C,)`` buffers; required when ``training=False``.
        weight, bias: optional ``(C,)`` affine parameters ``gamma``/``beta``.
        training: batch statistics (and buffer update) vs running statistics.
        momentum: weight of the new batch in the running average; a float in [0, 1]
            (the modules turn ``momentum=None`` into ``1 / num_batches_tracked``).
        eps: added to the variance.

    Shape:
        - x: ``(B, C, *)`` with any number of trailing dims (``(B, C)`` included)
        - output: same shape and dtype as ``x``.

    Raises:
        ValueError: one value per channel in training, eval without running stats,
            mis-shaped buffers/parameters, bad ``momentum``/``eps``.
    """
    _check_batch_norm_args(x, running_mean, running_var, weight, bias, training, momentum, eps)
    if not _native_ok(x, running_mean, running_var, weight, bias):
        return _batch_norm_reference(
            x, running_mean, running_var, weight, bias, training, momentum, eps
        )
    return F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)


def batch_norm_eval_mix(
    x: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    mix: float,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Inference example weighing (Summers & Dinneen, 2019): mix batch and running moments.

    With ``a = mix`` and the training-time second moment
    ``E_train[x^2] = running_var + running_mean^2`` (what the running buffers encode):

    .. math::
        \\mu = a\\,E_B[x] + (1 - a)\\,\\mu_{train}, \\qquad
        \\sigma^2 = a\\,E_B[x^2] + (1 - a)\\,E_{train}[x^2] - \\mu^2

    The variance is evaluated in the algebraically identical, cancellation-free form
    ``a var_B + (1 - a) running_var + a (1 - a) (E_B[x] - mu_train)^2`` from float32
    two-pass moments, so ``a = 0`` is exactly eval-mode batch norm, ``a = 1`` is
    train-mode normalisation by the batch's own moments, and inputs with a large
    common offset stay accurate. No buffer is updated.

    Args:
        x: input with channels at dim 1.
        running_mean, running_var: ``(C,)`` training-time statistics.
        mix: ``a`` in [0, 1].
        weight, bias: optional ``(C,)`` affine parameters.
        eps: added to the variance.

    Shape:
        - x: ``(B, C, *)``; output: same shape and dtype.
    """
    if not 0.0 <= mix <= 1.0:
        raise ValueError(f"mix must be in [0, 1], got {mix}")
    _check_batch_norm_args(x, running_mean, running_var, weight, bias, False, None, eps)
    batch_mean, batch_var = moments(x, _reduce_dims(x))
    train_mean, train_var = _running_view(running_mean, running_var, x, batch_mean.dtype)
    mean = torch.lerp(train_mean, batch_mean, mix)
    var = (
        mix * batch_var
        + (1.0 - mix) * train_var
        + (mix * (1.0 - mix)) * (batch_mean - train_mean) ** 2
    )
    return _normalize(x, mean, var, weight, bias, eps)


# --------------------------------------------------------------------------- ghost BN


def ghost_batch_norm(
    x: Tensor,
    virtual_batch_size: int,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Ghost batch normalization (Hoffer, Hubara & Soudry, 2017).

    In training the batch is split into ``G = B / virtual_batch_size`` consecutive
    virtual batches; each is normalised by its own mean and biased variance per channel
    (all at once, as a ``(G, B/G, C, *)`` view). The affine parameters are shared, and the
    running buffers get one update per call with the average over virtual batches of
    their means and unbiased variances. In evaluation it is plain :func:`batch_norm` with
    the running statistics. With one virtual batch it *is* batch norm.

    Args:
        x: input with channels at dim 1.
        virtual_batch_size: samples per virtual batch; must divide ``B`` (a value
            ``>= B`` means one virtual batch).
        running_mean, running_var, weight, bias, training, momentum, eps: as in
            :func:`batch_norm`.

    Shape:
        - x: ``(B, C, *)``; output: same shape and dtype.
    """
    if virtual_batch_size < 1:
        raise ValueError(f"virtual_batch_size must be positive, got {virtual_batch_size}")
    _check_batch_norm_args(x, running_mean, running_var, weight, bias, training, momentum, eps)
    if not training:
        return batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps)
    batch = x.shape[0]
    size = min(virtual_batch_size, batch)
    if batch % size:
        raise ValueError(f"virtual_batch_size {virtual_batch_size} must divide the batch {batch}")
    groups = batch // size
    _check_values_per_channel(x.numel() // (groups * x.shape[1]), x.shape)
    ghosts = x.reshape(groups, size, *x.shape[1:])  # (G, B/G, C, *)
    mean, var = moments(ghosts, (1, *range(3, ghosts.dim())))  # (G, 1, C, 1, ...)
    count = ghosts[0].numel() // x.shape[1]
    _update_running_stats(
        running_mean,
        running_var,
        mean.mean(0).flatten(),
        var.mean(0).flatten(),
        count,
        momentum,
    )
    y = (ghosts.to(mean.dtype) - mean) * torch.rsqrt(var + eps)
    return _affine(y.reshape(x.shape), weight, bias).to(x.dtype)


# --------------------------------------------------------------------------- renorm


def batch_renorm(
    x: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
    r_max: float = 3.0,
    d_max: float = 5.0,
) -> Tensor:
    """Batch renormalization (Ioffe, 2017).

    In training, with batch moments ``mu_B, sigma_B = sqrt(var_B + eps)`` and running
    ``mu, sigma = sqrt(running_var + eps)`` (before this step's update):

    .. math::
        r = \\mathrm{clip}_{[1/r_{max},\\, r_{max}]}\\Big(\\frac{\\sigma_B}{\\sigma}\\Big), \\quad
        d = \\mathrm{clip}_{[-d_{max},\\, d_{max}]}\\Big(\\frac{\\mu_B - \\mu}{\\sigma}\\Big), \\quad
        y = \\gamma \\Big(\\frac{x - \\mu_B}{\\sigma_B}\\, r + d\\Big) + \\beta

    with ``r`` and ``d`` treated as constants (no gradient). The running buffers are
    then updated exactly as in :func:`batch_norm`. In evaluation it is batch norm with
    the running statistics. ``r_max = 1, d_max = 0`` gives ``r = 1, d = 0``: batch norm.

    Args:
        x: input with channels at dim 1.
        running_mean, running_var: ``(C,)`` buffers (required: ``r``/``d`` use them).
        weight, bias, training, momentum, eps: as in :func:`batch_norm`.
        r_max: ``>= 1``; d_max: ``>= 0``.

    Shape:
        - x: ``(B, C, *)``; output: same shape and dtype.
    """
    if r_max < 1.0:
        raise ValueError(f"r_max must be >= 1, got {r_max}")
    if d_max < 0.0:
        raise ValueError(f"d_max must be >= 0, got {d_max}")
    if running_mean is None or running_var is None:
        raise ValueError("batch_renorm needs running_mean and running_var")
    _check_batch_norm_args(x, running_mean, running_var, weight, bias, training, momentum, eps)
    if not training:
        return batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps)
    batch_mean, batch_var = moments(x, _reduce_dims(x))
    work = batch_mean.dtype
    train_mean, train_var = _running_view(running_mean, running_var, x, work)
    train_std = torch.sqrt(train_var + eps)
    batch_std = torch.sqrt(batch_var + eps)
    with torch.no_grad():
        r = (batch_std / train_std).clamp(1.0 / r_max, r_max)
        d = ((batch_mean - train_mean) / train_std).clamp(-d_max, d_max)
    _update_from_batch(running_mean, running_var, batch_mean, batch_var, x, momentum)
    y = (x.to(work) - batch_mean) * (r / batch_std) + d
    return _affine(y, weight, bias).to(x.dtype)

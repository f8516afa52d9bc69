"""Switchable normalization (Luo et al., 2019): a convex mix of IN, LN and BN statistics.

The fast path reduces ``x`` once, to per-(sample, channel) instance moments, and derives
the layer and batch moments from them with the law of total variance
(``var = mean of variances + variance of means``, every group having the same size), then
applies the mixed statistics in one fused ``a * x + b`` pass. The plain composition that
reduces ``x`` three times, :func:`switchable_norm_reference`, is kept for the tests and
the benchmark.
"""

from __future__ import annotations

import torch
from torch import Tensor

from norms.functional import _args
from norms.functional._stats import acc_dtype, moments
from norms.functional.batch import (
    _channel_view,
    _check_eps,
    _check_momentum,
    _check_values_per_channel,
    _normalize,
    _running_view,
    _update_from_batch,
)

__all__ = ["switchable_norm"]


def _check_args(
    x: Tensor,
    mean_weight: Tensor,
    var_weight: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    training: bool,
    momentum: float,
) -> None:
    if x.dim() < 3:
        raise ValueError(
            f"switchable_norm needs (B, C, *spatial) with a spatial dim, got {tuple(x.shape)}"
        )
    _check_eps(eps)
    for name, w in (("mean_weight", mean_weight), ("var_weight", var_weight)):
        if w.shape != (3,):
            raise ValueError(f"{name} must have shape (3,) (IN, LN, BN), got {tuple(w.shape)}")
    _args.shapes(
        (x.shape[1],), weight=weight, bias=bias, running_mean=running_mean, running_var=running_var
    )
    _args.running_stats(running_mean, running_var)
    spatial = x[0, 0].numel()
    if spatial < 2:
        raise ValueError(
            f"instance statistics need more than 1 spatial value, got shape {tuple(x.shape)}"
        )
    if training:
        _check_values_per_channel(x.shape[0] * spatial, x.shape)
        if running_mean is not None:
            _check_momentum(momentum)
    else:
        _args.running_stats(running_mean, running_var, required=True)


def _mix(weights: Tensor, stats: tuple[Tensor, Tensor, Tensor]) -> Tensor:
    """``w_IN * s_IN + w_LN * s_LN + w_BN * s_BN`` (broadcasting shapes)."""
    w = weights.to(stats[0].dtype)
    return w[0] * stats[0] + w[1] * stats[1] + w[2] * stats[2]


def _bn_moments(
    x: Tensor,
    batch_mean: Tensor,
    batch_var: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    training: bool,
    momentum: float,
) -> tuple[Tensor, Tensor]:
    """The BN branch: batch moments (updating the buffers) in training, else the buffers."""
    if training:
        _update_from_batch(running_mean, running_var, batch_mean, batch_var, x, momentum)
        return batch_mean, batch_var
    assert running_mean is not None and running_var is not None  # checked: eval needs them
    return _running_view(running_mean, running_var, x, batch_mean.dtype)


def switchable_norm(
    x: Tensor,
    mean_weight: Tensor,
    var_weight: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    training: bool = True,
    momentum: float = 0.1,
) -> Tensor:
    """Switchable normalization with given mixing weights.

    With per-(b, c) instance moments over the spatial dims, per-b layer moments over
    (C, spatial) and per-c batch moments over (B, spatial), all biased:

    .. math::
        \\mu = \\sum_k w^{\\mu}_k \\mu_k, \\quad \\sigma^2 = \\sum_k w^{\\sigma}_k \\sigma^2_k,
        \\quad k \\in (IN, LN, BN), \\qquad
        y = \\gamma\\frac{x - \\mu}{\\sqrt{\\sigma^2 + \\epsilon}} + \\beta

    The LN and BN moments come from the IN ones: ``mu_LN = mean_c mu_IN`` and
    ``var_LN = mean_c var_IN + var_c mu_IN`` (likewise over b for BN), so ``x`` is read
    once for statistics and once for the output. In training the BN branch uses the
    batch moments and updates the running buffers (unbiased variance, as batch norm);
    in evaluation it uses the buffers, while IN and LN always use the current input.

    Args:
        x: input with channels at dim 1 and at least one spatial dim.
        mean_weight, var_weight: ``(3,)`` convex weights over (IN, LN, BN), in that order
            (the module passes softmaxes of learned logits; they are not renormalised).
        weight, bias: optional ``(C,)`` affine parameters.
        eps: added to the mixed variance.
        running_mean, running_var: ``(C,)`` BN-branch buffers; required in evaluation.
        training: batch vs running statistics in the BN branch.
        momentum: as in :func:`norms.functional.batch_norm`.

    Shape:
        - x: ``(B, C, *spatial)``; output: same shape and dtype.
    """
    _check_args(
        x, mean_weight, var_weight, weight, bias, eps, running_mean, running_var, training, momentum
    )
    spatial_dims = tuple(range(2, x.dim()))
    in_mean, in_var = moments(x, spatial_dims)  # (B, C, 1, ...)
    ln_mean = in_mean.mean(1, keepdim=True)  # (B, 1, 1, ...)
    ln_var = in_var.mean(1, keepdim=True) + in_mean.var(1, keepdim=True, correction=0)
    bn_mean = in_mean.mean(0, keepdim=True)  # (1, C, 1, ...)
    bn_var = in_var.mean(0, keepdim=True) + in_mean.var(0, keepdim=True, correction=0)
    bn_mean, bn_var = _bn_moments(x, bn_mean, bn_var, running_mean, running_var, training, momentum)
    mean = _mix(mean_weight, (in_mean, ln_mean, bn_mean))  # (B, C, 1, ...)
    var = _mix(var_weight, (in_var, ln_var, bn_var))
    scale = torch.rsqrt(var + eps)
    if weight is not None:
        scale = scale * _channel_view(weight.to(scale.dtype), x)
    shift = -mean * scale
    if bias is not None:
        shift = shift + _channel_view(bias.to(scale.dtype), x)
    return torch.addcmul(shift, x.to(acc_dtype(x.dtype)), scale).to(x.dtype)


def switchable_norm_reference(
    x: Tensor,
    mean_weight: Tensor,
    var_weight: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    training: bool = True,
    momentum: float = 0.1,
) -> Tensor:
    """The plain eager composition of :func:`switchable_norm`: three reductions of ``x``.

    Each branch's moments are reduced from ``x`` directly and the mix is applied as
    ``(x - mu) / sqrt(var + eps) * gamma + beta``. Same arguments and results.
    """
    _check_args(
        x, mean_weight, var_weight, weight, bias, eps, running_mean, running_var, training, momentum
    )
    spatial_dims = tuple(range(2, x.dim()))
    in_moments = moments(x, spatial_dims)
    ln_moments = moments(x, (1, *spatial_dims))
    bn_mean, bn_var = moments(x, (0, *spatial_dims))
    bn_moments = _bn_moments(x, bn_mean, bn_var, running_mean, running_var, training, momentum)
    mean = _mix(mean_weight, (in_moments[0], ln_moments[0], bn_moments[0]))
    var = _mix(var_weight, (in_moments[1], ln_moments[1], bn_moments[1]))
    return _normalize(x, mean, var, weight, bias, eps)

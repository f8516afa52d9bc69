"""Per-sample normalization: layer, RMS, Lp (power), group and instance norm.

Fast paths are torch's native kernels, used where they are accurate: float32 / float64
inputs for layer norm and, when contiguous, group norm; instance norm as group norm with one group per
channel (2-3x faster than ``F.instance_norm`` on the CPU), and RMS norm always (its
kernel upcasts and has no mean to cancel). Elsewhere a vectorised composite is used:

- half / bfloat16 inputs: the native kernels apply ``x * rstd - mean * rstd``, which
  cancels catastrophically after a large common offset (1e4 + N(0, 1)); the composite
  computes ``(x - mean) * rstd`` in float32 and casts once;
- channels_last group norm: torch's CPU kernel forms ``E[x^2] - E[x]^2`` there;
- instance norm with running statistics.

Statistics always come from :func:`norms.functional._stats.moments` (``var_mean`` in
float32 or float64). Lp norm, which torch lacks, is a vectorised composite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

from norms.functional import _args
from norms.functional._stats import acc_dtype, moments

__all__ = ["group_norm", "instance_norm", "layer_norm", "lp_norm", "rms_norm"]

ShapeLike = int | Sequence[int]
_NATIVE_DTYPES = (torch.float32, torch.float64)


def _native_ok(x: Tensor) -> bool:
    """Whether torch's native kernel is accurate for ``x`` (see the module docstring)."""
    return x.dtype in _NATIVE_DTYPES and x.is_contiguous()


def center_scale_shift(x: Tensor, mean: Tensor, scale: Tensor, shift: Tensor | None) -> Tensor:
    """``(x - mean) * scale + shift`` in one fused pass where it is safe, in ``x.dtype``.

    ``mean``, ``scale`` and ``shift`` are statistics-sized tensors in the accumulation
    dtype that broadcast against ``x``. For float32 / float64 inputs the constant terms
    are folded, ``y = scale * x + (shift - scale * mean)``, one ``addcmul`` (its rounding
    is that of ``scale * x``, the scale at which ``x`` itself is represented). For half /
    bfloat16 inputs the centring is done first in float32 so a large mean never meets a
    large scale, and the result is cast back once.
    """
    if x.dtype in _NATIVE_DTYPES:
        folded = -mean * scale if shift is None else shift - mean * scale
        return torch.addcmul(folded.to(x.dtype), x, scale.to(x.dtype))
    centred = x.to(torch.float32) - mean
    y = centred.mul_(scale) if shift is None else torch.addcmul(shift, centred, scale)
    return y.to(x.dtype)


def _group_fast_path(
    x: Tensor, num_groups: int, weight: Tensor | None, bias: Tensor | None, eps: float
) -> Tensor | None:
    """Group norm by torch's native kernel where it serves ``x`` (see the module
    docstring); ``None`` where the composite is needed."""
    if _native_ok(x):
        return F.group_norm(x, num_groups, weight, bias, eps)
    return None


def _normalize_channels(
    x: Tensor,
    mean: Tensor,
    var: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    param_view: tuple[int, ...],
) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` by :func:`center_scale_shift`, the
    per-channel ``(C,)`` parameters viewed as ``param_view`` against ``x``."""
    scale = torch.rsqrt(var + eps)
    if weight is not None:
        scale = scale * weight.to(scale.dtype).view(param_view)
    shift = None if bias is None else bias.to(scale.dtype).view(param_view).expand_as(scale)
    return center_scale_shift(x, mean, scale, shift)


def _as_shape(x: Tensor, normalized_shape: ShapeLike) -> tuple[int, ...]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or any(int(s) <= 0 for s in shape):
        raise ValueError(f"normalized_shape must be non-empty and positive, got {normalized_shape}")
    if x.dim() < len(shape) or tuple(x.shape[-len(shape) :]) != shape:
        raise ValueError(
            f"normalized_shape {shape} does not match the trailing dims of {tuple(x.shape)}"
        )
    return shape


def _check_eps(eps: float) -> None:
    _args.eps(eps)


def layer_norm(
    x: Tensor,
    normalized_shape: ShapeLike,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Layer normalization (Ba et al., 2016) over the trailing ``normalized_shape`` dims.

    .. math:: y = \\frac{x - \\mathrm{E}[x]}{\\sqrt{\\mathrm{Var}[x] + \\epsilon}} \\odot w + b

    Args:
        x: input.
        normalized_shape: the trailing dims reduced over (an int means the last dim).
        weight, bias: optional elementwise affine of shape ``normalized_shape``.
        eps: added to the biased variance.

    Shape:
        - x: ``(*, *normalized_shape)``; output: same, in ``x.dtype``.
    """
    shape = _as_shape(x, normalized_shape)
    _args.shapes(shape, weight=weight, bias=bias)
    _check_eps(eps)
    if x.dtype in _NATIVE_DTYPES:
        return F.layer_norm(x, shape, weight, bias, eps)
    mean, var = moments(x, range(x.dim() - len(shape), x.dim()))
    y = (x.to(mean.dtype) - mean).mul_(torch.rsqrt(var + eps))
    return _elementwise_affine(y, weight, bias).to(x.dtype)


def _elementwise_affine(y: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """``y * weight + bias`` with either term optional, in ``y``'s (accumulation) dtype."""
    if weight is not None and bias is not None:
        return torch.addcmul(bias.to(y.dtype), y, weight.to(y.dtype))
    if weight is not None:
        y = y * weight.to(y.dtype)
    if bias is not None:
        y = y + bias.to(y.dtype)
    return y


def rms_norm(
    x: Tensor,
    normalized_shape: ShapeLike,
    weight: Tensor | None = None,
    eps: float | None = 1e-6,
) -> Tensor:
    """Root-mean-square normalization (Zhang & Sennrich, 2019).

    .. math:: y = \\frac{x}{\\sqrt{\\mathrm{E}[x^2] + \\epsilon}} \\odot w

    No mean is subtracted, so there is no cancellation to guard against; the mean of
    squares is accumulated in float32 for half/bfloat16 inputs (torch's kernel upcasts).
    ``eps=None`` means what it means in torch: the machine epsilon of the computation
    dtype, ``torch.finfo(float32).eps`` for half / bfloat16 / float32 inputs and
    ``torch.finfo(float64).eps`` for float64.

    Shape:
        - x: ``(*, *normalized_shape)``; weight: ``normalized_shape``; output: as x.
    """
    shape = _as_shape(x, normalized_shape)
    _args.shapes(shape, weight=weight)
    _args.eps(eps, allow_none=True)
    return F.rms_norm(x, shape, weight, eps)


def lp_norm(
    x: Tensor,
    p: float,
    normalized_shape: ShapeLike,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-6,
) -> Tensor:
    """Lp (power) normalization: divide by the generalised ``p``-mean of ``|x|``.

    .. math:: y = \\frac{x}{\\left(\\mathrm{E}[|x|^p] + \\epsilon\\right)^{1/p}} \\odot w + b

    ``p = 2`` without bias is :func:`rms_norm`; ``p = 1`` divides by the mean absolute
    value. The power mean is accumulated in float32 (float64 for float64 inputs).

    Args:
        x: input.
        p: the power, finite and positive.
        normalized_shape: the trailing dims reduced over.
        weight, bias: optional elementwise affine of shape ``normalized_shape``.
        eps: added to the power mean.

    Shape:
        - x: ``(*, *normalized_shape)``; output: same, in ``x.dtype``.
    """
    if not (isinstance(p, int | float) and math.isfinite(p) and p > 0):
        raise ValueError(f"p must be a finite positive number, got {p}")
    shape = _as_shape(x, normalized_shape)
    _args.shapes(shape, weight=weight, bias=bias)
    _check_eps(eps)
    dims = tuple(range(x.dim() - len(shape), x.dim()))
    work = x.to(acc_dtype(x.dtype))
    power_mean = work.abs().pow(p).mean(dims, keepdim=True)
    y = work * (power_mean + eps).pow(-1.0 / p)
    return _elementwise_affine(y, weight, bias).to(x.dtype)


def group_norm(
    x: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Group normalization (Wu & He, 2018): statistics per sample over each channel group.

    .. math:: y = \\frac{x - \\mathrm{E}_g[x]}{\\sqrt{\\mathrm{Var}_g[x] + \\epsilon}}
              \\odot w_c + b_c

    ``num_groups == C`` is instance norm; ``num_groups == 1`` is layer norm over
    ``(C, *spatial)`` (with per-channel rather than per-element affine).

    Args:
        x: input with channels at dim 1.
        num_groups: must divide ``C``.
        weight, bias: optional per-channel affine ``(C,)``.
        eps: added to the biased variance.

    Shape:
        - x: ``(B, C, *)``; output: same, in ``x.dtype``.
    """
    if x.dim() < 2:
        raise ValueError(f"x must be (B, C, *), got {tuple(x.shape)}")
    channels = x.shape[1]
    if num_groups <= 0 or channels % num_groups:
        raise ValueError(f"num_groups must be positive and divide {channels}, got {num_groups}")
    _args.shapes((channels,), weight=weight, bias=bias)
    _check_eps(eps)
    fast = _group_fast_path(x, num_groups, weight, bias, eps)
    if fast is not None:
        return fast
    batch, per_group = x.shape[0], channels // num_groups
    grouped = x.view(batch, num_groups, per_group, *x.shape[2:])  # (B, G, C/G, *)
    mean, var = moments(grouped, range(2, grouped.dim()))  # (B, G, 1, ...)
    param_view = (1, num_groups, per_group) + (1,) * (x.dim() - 2)
    y = _normalize_channels(grouped, mean, var, weight, bias, eps, param_view)
    return y.reshape(x.shape)


def instance_norm(
    x: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    *,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
) -> Tensor:
    """Instance normalization (Ulyanov et al., 2016): per sample and channel over space.

    .. math:: y = \\frac{x - \\mathrm{E}_{s}[x]}{\\sqrt{\\mathrm{Var}_{s}[x] + \\epsilon}}
              \\odot w_c + b_c

    Optional running statistics (keyword-only, torch's convention): with
    ``use_input_stats`` the batch's per-instance moments normalise ``x`` and, when given,
    ``running_mean`` / ``running_var`` are updated in place with the batch average of
    the per-instance mean and *unbiased* variance,
    ``r <- (1 - momentum) * r + momentum * stat``; with ``use_input_stats=False`` the
    running statistics normalise every instance (an eval-mode per-channel affine).

    Args:
        x: input with channels at dim 1 and at least one spatial dim.
        weight, bias: optional per-channel affine ``(C,)``.
        eps: added to the variance.
        running_mean, running_var: optional ``(C,)`` buffers.
        use_input_stats: normalise with the input's own statistics.
        momentum: running-average factor in ``[0, 1]``.

    Shape:
        - x: ``(B, C, *spatial)``; output: same, in ``x.dtype``.
    """
    if x.dim() < 3:
        raise ValueError(f"x must be (B, C, *spatial) with a spatial dim, got {tuple(x.shape)}")
    channels = x.shape[1]
    _args.shapes(
        (channels,), weight=weight, bias=bias, running_mean=running_mean, running_var=running_var
    )
    _check_eps(eps)
    _args.running_stats(
        running_mean, running_var, required=not use_input_stats, why="use_input_stats=False"
    )
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must lie in [0, 1], got {momentum}")
    spatial = math.prod(x.shape[2:])
    if use_input_stats and spatial <= 1:
        raise ValueError(f"instance norm needs more than one spatial value, got {tuple(x.shape)}")
    if use_input_stats and running_mean is None:
        fast = _group_fast_path(x, channels, weight, bias, eps)
        if fast is not None:
            return fast
    param_view = (1, channels) + (1,) * (x.dim() - 2)
    if use_input_stats:
        mean, var = moments(x, range(2, x.dim()))  # (B, C, 1, ...)
        if running_mean is not None and running_var is not None:  # both or neither
            _update_running(
                running_mean, running_var, mean, var * spatial / (spatial - 1), momentum
            )
    else:
        assert running_mean is not None and running_var is not None  # checked above
        mean = running_mean.to(acc_dtype(x.dtype)).view(param_view)
        var = running_var.to(mean.dtype).view(param_view)
    return _normalize_channels(x, mean, var, weight, bias, eps, param_view)


@torch.no_grad()
def _update_running(
    running_mean: Tensor, running_var: Tensor, mean: Tensor, unbiased_var: Tensor, momentum: float
) -> None:
    """``r <- (1 - momentum) r + momentum * batch_average(stat)`` in place, per channel."""
    channels = running_mean.shape[0]
    batch_mean = mean.reshape(-1, channels).mean(0)
    batch_var = unbiased_var.reshape(-1, channels).mean(0)
    running_mean.lerp_(batch_mean.to(running_mean.dtype), momentum)
    running_var.lerp_(batch_var.to(running_var.dtype), momentum)

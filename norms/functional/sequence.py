"""Batch normalization for padded sequences (the input-to-hidden term of a recurrent layer).

Sequences are batch-first ``(B, T, C)``; padding is given by a boolean mask ``(B, T)``
(``True`` = valid) or by lengths ``(B,)``. Two ways to pool statistics:

* ``stats="sequence"``: one mean/variance per channel over every valid (b, t)
  (Laurent et al., 2016);
* ``stats="frame"``: one per time step and channel over the valid b at that step
  (Cooijmans et al., 2017), with running statistics ``(L, C)`` per step; steps
  ``t >= L`` use row ``L - 1`` in evaluation and leave the running statistics alone.

Padded positions never enter a statistic (they are selected away with ``torch.where``,
so even NaN padding cannot leak), and their outputs are zero.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from norms.functional import _args
from norms.functional._stats import acc_dtype
from norms.functional.batch import _check_eps, _check_momentum, _check_values_per_channel

__all__ = ["sequence_batch_norm", "sequence_mask"]

Stats = Literal["sequence", "frame"]


def sequence_mask(lengths: Tensor, max_len: int) -> Tensor:
    """``(B,)`` lengths -> ``(B, max_len)`` bool mask, ``True`` at ``t < lengths[b]``."""
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be (B,), got {tuple(lengths.shape)}")
    if bool((lengths < 0).any()) or bool((lengths > max_len).any()):
        raise ValueError(f"lengths must lie in [0, {max_len}], got {lengths.tolist()}")
    steps = torch.arange(max_len, device=lengths.device)
    return steps < lengths[:, None]


def _resolve_mask(x: Tensor, mask: Tensor | None, lengths: Tensor | None) -> Tensor:
    batch, steps = x.shape[:2]
    if mask is not None and lengths is not None:
        raise ValueError("give either mask or lengths, not both")
    if lengths is not None:
        if lengths.shape != (batch,):
            raise ValueError(f"lengths must have shape ({batch},), got {tuple(lengths.shape)}")
        return sequence_mask(lengths.to(x.device), steps)
    if mask is None:
        return torch.ones(batch, steps, dtype=torch.bool, device=x.device)
    if mask.shape != (batch, steps) or mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be a bool tensor of shape ({batch}, {steps}), "
            f"got {mask.dtype} {tuple(mask.shape)}"
        )
    return mask


def _frame_rows(steps: int, rows: int, device: torch.device) -> Tensor:
    """Running-stat row per step: ``t`` for ``t < rows``, then ``rows - 1``."""
    return torch.arange(steps, device=device).clamp(max=rows - 1)


def _check_args(
    x: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
    stats: str,
) -> None:
    if x.dim() != 3:
        raise ValueError(f"expected a (B, T, C) sequence batch, got shape {tuple(x.shape)}")
    if stats not in ("sequence", "frame"):
        raise ValueError(f"stats must be 'sequence' or 'frame', got {stats!r}")
    _check_eps(eps)
    channels = x.shape[2]
    _args.shapes((channels,), weight=weight, bias=bias)
    _args.running_stats(running_mean, running_var, required=not training)
    if running_mean is not None and running_var is not None:  # both or neither
        want = "(C,)" if stats == "sequence" else "(L, C)"
        ok_dim = running_mean.dim() == (1 if stats == "sequence" else 2)
        if (
            not ok_dim
            or running_mean.shape[-1] != channels
            or running_mean.shape != running_var.shape
            or running_mean.numel() == 0
        ):
            raise ValueError(
                f"stats={stats!r} needs running buffers shaped {want} with C={channels}, got "
                f"{tuple(running_mean.shape)} and {tuple(running_var.shape)}"
            )
    if training and running_mean is not None:
        _check_momentum(momentum)


def sequence_batch_norm(
    x: Tensor,
    mask: Tensor | None = None,
    lengths: Tensor | None = None,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
    *,
    stats: Stats = "sequence",
) -> Tensor:
    """Batch normalization of a padded sequence batch, statistics over valid steps only.

    With ``V`` the valid positions (per channel ``c``; per step ``t`` too for
    ``stats="frame"``), ``n = |V|``:

    .. math::
        \\mu = \\frac{1}{n}\\sum_{V} x, \\quad
        \\sigma^2 = \\frac{1}{n}\\sum_{V} (x - \\mu)^2, \\quad
        y = \\gamma\\frac{x - \\mu}{\\sqrt{\\sigma^2 + \\epsilon}} + \\beta \\text{ on } V,
        \\; 0 \\text{ elsewhere}

    In training the running buffers are updated in place with ``momentum`` and the
    unbiased variance ``sigma^2 n / (n - 1)``, as in batch norm. In frame mode only the
    rows of steps with at least two valid values are updated; a step with a single valid
    value normalises it to ``beta`` (zero variance), and a batch without any such pair
    raises. In evaluation the running statistics are used.

    Args:
        x: batch-first sequences.
        mask: ``(B, T)`` bool, ``True`` = valid; or
        lengths: ``(B,)`` valid lengths (prefix masks). Neither: every step is valid.
        running_mean, running_var: ``(C,)`` for ``stats="sequence"``, ``(L, C)`` for
            ``stats="frame"``; required when ``training=False``.
        weight, bias: optional ``(C,)`` affine parameters.
        training, momentum, eps: as in :func:`norms.functional.batch_norm`.
        stats: ``"sequence"`` or ``"frame"`` (see above).

    Shape:
        - x: ``(B, T, C)``; output: same shape and dtype, zero at padded positions.
    """
    _check_args(x, running_mean, running_var, weight, bias, training, momentum, eps, stats)
    valid = _resolve_mask(x, mask, lengths)[..., None]  # (B, T, 1)
    work = acc_dtype(x.dtype)
    xw = torch.where(valid, x.to(work), 0.0)
    reduce = (0, 1) if stats == "sequence" else (0,)
    if training:
        count = valid.sum(reduce, keepdim=True).to(work)  # (1, 1, 1) or (1, T, 1)
        _check_values_per_channel(int(count.max()), x.shape)
        safe_count = count.clamp(min=1.0)
        mean = xw.sum(reduce, keepdim=True) / safe_count
        centred = torch.where(valid, xw - mean, 0.0)
        var = (centred * centred).sum(reduce, keepdim=True) / safe_count
        if running_mean is not None and running_var is not None:  # both or neither
            _update_sequence_stats(running_mean, running_var, mean, var, count, momentum)
    else:
        assert running_mean is not None and running_var is not None  # checked above
        if stats == "sequence":
            mean, var = running_mean.to(work), running_var.to(work)
        else:
            rows = _frame_rows(x.shape[1], running_mean.shape[0], x.device)
            mean, var = running_mean.to(work)[rows], running_var.to(work)[rows]  # (T, C)
    y = (xw - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.to(work)
    if bias is not None:
        y = y + bias.to(work)
    return torch.where(valid, y, 0.0).to(x.dtype)


def _update_sequence_stats(
    running_mean: Tensor,
    running_var: Tensor,
    mean: Tensor,
    var: Tensor,
    count: Tensor,
    momentum: float,
) -> None:
    """In-place running update; in frame mode only rows of steps with >= 2 valid values."""
    with torch.no_grad():
        mean, var, count = mean.detach()[0], var.detach()[0], count[0]  # (1 or T, C|1)
        unbiased = var * count / (count - 1).clamp(min=1.0)
        if running_mean.dim() == 1:
            running_mean.lerp_(mean[0].to(running_mean.dtype), momentum)
            running_var.lerp_(unbiased[0].to(running_var.dtype), momentum)
            return
        rows = min(mean.shape[0], running_mean.shape[0])
        weight = torch.where(count[:rows] >= 2, momentum, 0.0).to(running_mean.dtype)
        running_mean[:rows].lerp_(mean[:rows].to(running_mean.dtype), weight)
        running_var[:rows].lerp_(unbiased[:rows].to(running_var.dtype), weight)

"""Triton kernels over the last dim: layer norm fused with adaLN modulation, and RMS norm.

One program normalises one row of ``D`` values held in registers (``D <= MAX_WIDTH``):
one read and one write of the tensor, statistics in float32 by the two-pass form on the
registers (the mean first, then the squared deviations; never ``E[x^2] - E[x]^2``).

.. math::
    \\text{layer norm + modulate:}\\quad
    y = \\frac{x - \\mu}{\\sqrt{\\sigma^2 + \\epsilon}} \\odot (1 + \\text{scale}_b)
        + \\text{shift}_b

    \\text{RMS norm:}\\quad y = \\frac{x}{\\sqrt{\\mathrm{E}[x^2] + \\epsilon}} \\odot w

The reference of each is :func:`norms.functional.ada_layer_norm` /
:func:`norms.functional.rms_norm` (tests under ``TRITON_INTERPRET=1``). Half, bfloat16 and
float32 inputs; the output has the input's dtype.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch import Tensor

#: The widest row one program holds (float32 registers); wider rows stay with torch.
MAX_WIDTH = 16384
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _row_norm_kernel(
    x_ptr,
    y_ptr,
    weight_ptr,
    shift_ptr,
    scale_ptr,
    rows_per_sample,
    modulation_stride,
    width,
    eps,
    CENTER: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    MODULATE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < width
    x = tl.load(x_ptr + row * width + cols, mask=inside, other=0.0).to(tl.float32)
    if CENTER:
        mean = tl.sum(x, axis=0) / width
        x = tl.where(inside, x - mean, 0.0)
    y = x / tl.sqrt_rn(tl.sum(x * x, axis=0) / width + eps)
    if HAS_WEIGHT:
        y = y * tl.load(weight_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    if MODULATE:
        offset = (row // rows_per_sample) * modulation_stride + cols
        shift = tl.load(shift_ptr + offset, mask=inside, other=0.0).to(tl.float32)
        scale = tl.load(scale_ptr + offset, mask=inside, other=0.0).to(tl.float32)
        y = y * (1.0 + scale) + shift
    tl.store(y_ptr + row * width + cols, y.to(y_ptr.dtype.element_ty), mask=inside)


def supports(x: Tensor) -> bool:
    """Whether the row kernels take ``x``: a supported dtype, contiguous, ``D <= MAX_WIDTH``."""
    return (
        x.dtype in SUPPORTED_DTYPES
        and x.is_contiguous()
        and x.dim() >= 1
        and 0 < x.shape[-1] <= MAX_WIDTH
        and x.numel() > 0
    )


class _Modulation(NamedTuple):
    """adaLN's ``* (1 + scale) + shift``, ``(B or 1, D)`` each, one row per sample of
    ``rows_per_sample`` consecutive rows of ``x``."""

    shift: Tensor
    scale: Tensor
    rows_per_sample: int


def _launch(
    x: Tensor,
    eps: float,
    *,
    center: bool,
    weight: Tensor | None,
    modulation: _Modulation | None,
) -> Tensor:
    width = x.shape[-1]
    rows = x.numel() // width
    y = torch.empty_like(x)
    dummy = x  # never read when its flag is off
    shift_arg = scale_arg = dummy
    modulation_stride, rows_per_sample = 0, 1
    if modulation is not None:
        shift_arg, scale_arg = modulation.shift.contiguous(), modulation.scale.contiguous()
        modulation_stride = width if modulation.shift.shape[0] > 1 else 0
        rows_per_sample = modulation.rows_per_sample
    block = triton.next_power_of_2(width)
    _row_norm_kernel[(rows,)](
        x,
        y,
        dummy if weight is None else weight,
        shift_arg,
        scale_arg,
        rows_per_sample,
        modulation_stride,
        width,
        eps,
        CENTER=center,
        HAS_WEIGHT=weight is not None,
        MODULATE=modulation is not None,
        BLOCK=block,
        num_warps=min(16, max(1, block // 256)),
    )
    return y


def ada_layer_norm(x: Tensor, shift: Tensor, scale: Tensor, eps: float = 1e-6) -> Tensor:
    """Layer norm over the last dim (no affine), then ``* (1 + scale) + shift``.

    Shape:
        - x: ``(B, T, D)`` contiguous; shift, scale: ``(B, D)`` or ``(1, D)``
        - output: ``(B, T, D)`` in ``x.dtype``.
    """
    modulation = _Modulation(shift, scale, rows_per_sample=x.shape[1])
    return _launch(x, eps, center=True, weight=None, modulation=modulation)


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """RMS norm over the last dim, with an optional ``(D,)`` weight.

    Shape:
        - x: ``(*, D)`` contiguous; output: same, in ``x.dtype``.
    """
    weight = None if weight is None else weight.contiguous()
    return _launch(x, eps, center=False, weight=weight, modulation=None)

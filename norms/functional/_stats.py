"""Numerically careful moment helpers shared by every member.

Statistics are accumulated in float32 for half/bfloat16/float32 inputs and in float64
for float64 inputs, with torch's two-pass / Welford reductions (``torch.var_mean``),
never ``E[x^2] - E[x]^2`` on raw values.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype statistics are accumulated in: float64 stays, everything else -> float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def moments(
    x: Tensor, dims: Sequence[int], *, keepdim: bool = True, correction: int = 0
) -> tuple[Tensor, Tensor]:
    """Mean and variance of ``x`` over ``dims`` in the accumulation dtype.

    .. math:: \\mu = \\frac{1}{n}\\sum x, \\qquad \\sigma^2 = \\frac{1}{n - c}\\sum (x - \\mu)^2

    Args:
        x: any shape, any floating dtype.
        dims: the reduced dimensions.
        keepdim: keep reduced dims as size 1 (for broadcasting back).
        correction: ``c`` above; 0 is the biased variance.

    Returns:
        ``(mean, var)``, each in ``acc_dtype(x.dtype)``.
    """
    var, mean = torch.var_mean(
        x.to(acc_dtype(x.dtype)), dim=tuple(dims), correction=correction, keepdim=keepdim
    )
    return mean, var

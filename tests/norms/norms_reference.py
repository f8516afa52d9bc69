"""Independent float64 references of every member's formula, written as plainly as possible.

Each function upcasts to float64, spells out the formula of DESIGN.md term by term with
elementary tensor operations (no torch normalization kernel, no shared code with
``norms``), and returns float64.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _f64(*tensors: Tensor) -> list[Tensor]:
    return [t.detach().to(torch.float64) for t in tensors]


def spatial_mean_var(x: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and biased variance per (B, C) over the spatial dims, two-pass."""
    (x,) = _f64(x)
    flat = x.reshape(x.shape[0], x.shape[1], -1)
    mean = flat.sum(-1) / flat.shape[-1]
    var = ((flat - mean[..., None]) ** 2).sum(-1) / flat.shape[-1]
    return mean, var


def adain(content: Tensor, style: Tensor, eps: float = 1e-5) -> Tensor:
    c, s = _f64(content, style)
    mean_c, var_c = spatial_mean_var(c)
    mean_s, var_s = spatial_mean_var(s)
    view = mean_c.shape + (1,) * (c.dim() - 2)
    mean_s = mean_s.expand_as(mean_c).reshape(view)
    std_s = torch.sqrt(var_s + eps).expand_as(mean_c).reshape(view)
    normalised = (c - mean_c.reshape(view)) / torch.sqrt(var_c.reshape(view) + eps)
    return std_s * normalised + mean_s

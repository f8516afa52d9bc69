"""Numerically careful moment helpers shared by every member.

Moments are returned in float32 for half/bfloat16/float32 inputs and in float64 for
float64 inputs, never from ``E[x^2] - E[x]^2`` on raw values:

- tensors of at most ``CHUNK_ELEMENTS`` elements, any tensor under autograd, and any
  tensor off the CPU (a GPU's Welford kernel is one launch; the chunked loop below, tuned
  for a CPU core's cache, would be hundreds): ``torch.var_mean`` (Welford; its CPU kernel accumulates float32 in float64, so the
  moments are correctly rounded, and autograd differentiates it);
- larger CPU tensors without autograd, where that Welford kernel is slow (several times
  slower than two reads of the tensor, most on channels_last feature maps): the
  shifted two-pass form. A first pass gives a shift ``m`` (the mean, rounded); the
  second sums the deviations ``d = x - m`` and their squares, and

  .. math:: \\mu = m + \\frac{S_1}{n}, \\qquad
            \\sigma^2 = \\frac{S_2 - S_1^2 / n}{n - c}, \\qquad
            S_1 = \\sum d, \\quad S_2 = \\sum d^2

  (the corrected two-pass algorithm of Chan, Golub & LeVeque, 1983: ``S_1^2 / n``
  removes the shift's rounding). The second pass runs in chunks along the outermost
  dimension in memory through one reused buffer of ``CHUNK_ELEMENTS``, so the
  deviations never make a full-size temporary; each chunk's sums are in the
  accumulation dtype and their total in float64. The relative error stays within a
  few float32 ulps (``tests/norms/test_moments.py``); the speed-up on the 2-core CPU is
  measured in commit 5dea64e (docs/norms.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

#: Elements per chunk of the second pass (1 MiB of float32): small enough to stay in
#: a core's cache, large enough that the Python loop costs nothing measurable.
CHUNK_ELEMENTS = 1 << 18


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype moments are returned in: float64 stays, everything else -> float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def moments(
    x: Tensor, dims: Sequence[int], *, keepdim: bool = True, correction: int = 0
) -> tuple[Tensor, Tensor]:
    """Mean and variance of ``x`` over ``dims`` in the accumulation dtype.

    .. math:: \\mu = \\frac{1}{n}\\sum x, \\qquad \\sigma^2 = \\frac{1}{n - c}\\sum (x - \\mu)^2

    computed as the module docstring says.

    Args:
        x: any shape, any floating dtype.
        dims: the reduced dimensions (at least one).
        keepdim: keep reduced dims as size 1 (for broadcasting back).
        correction: ``c`` above; 0 is the biased variance.

    Returns:
        ``(mean, var)``, each in ``acc_dtype(x.dtype)``.
    """
    reduced = tuple(sorted({dim % x.dim() for dim in dims}))
    if not reduced:
        raise ValueError("moments needs at least one reduced dimension")
    dtype = acc_dtype(x.dtype)
    if (
        x.device.type != "cpu"
        or (torch.is_grad_enabled() and x.requires_grad)
        or x.numel() <= CHUNK_ELEMENTS
    ):
        var, mean = torch.var_mean(x.to(dtype), dim=reduced, correction=correction, keepdim=True)
    else:
        shift = x.mean(reduced, keepdim=True, dtype=dtype)
        first, second = _chunked_deviation_sums(x, shift, reduced)
        count = math.prod(x.shape[dim] for dim in reduced)
        mean = (shift + first / count).to(dtype)
        var = ((second - first * first / count) / (count - correction)).to(dtype)
    if not keepdim:
        mean, var = mean.squeeze(reduced), var.squeeze(reduced)
    return mean, var


def _chunked_deviation_sums(
    x: Tensor, shift: Tensor, reduced: tuple[int, ...]
) -> tuple[Tensor, Tensor]:
    """``(sum(d), sum(d^2))`` over ``reduced`` (kept as size 1) for ``d = x - shift``,
    chunked along the outermost dimension in memory through one reused buffer; each
    chunk's sums in ``shift.dtype``, their total in float64. No autograd."""
    outer = [dim for dim in range(x.dim()) if x.shape[dim] > 1]
    chunk_dim = max(outer, key=x.stride) if outer else 0
    size = x.shape[chunk_dim]
    step = max(1, CHUNK_ELEMENTS // max(1, x.numel() // max(1, size)))
    buffer = torch.empty_like(x.narrow(chunk_dim, 0, min(step, size)), dtype=shift.dtype)
    firsts: list[Tensor] = []
    seconds: list[Tensor] = []
    for start in range(0, size, step):
        length = min(step, size - start)
        centre = shift if chunk_dim in reduced else shift.narrow(chunk_dim, start, length)
        scratch = buffer.narrow(chunk_dim, 0, length)
        deviations = torch.sub(x.narrow(chunk_dim, start, length), centre, out=scratch)
        firsts.append(deviations.sum(reduced, keepdim=True))
        seconds.append(deviations.square_().sum(reduced, keepdim=True))
    if chunk_dim in reduced:
        return torch.stack(firsts).double().sum(0), torch.stack(seconds).double().sum(0)
    return torch.cat(firsts, chunk_dim).double(), torch.cat(seconds, chunk_dim).double()

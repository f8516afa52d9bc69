"""Dynamic tanh (DyT), the normalization-free replacement for layer norm."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["dynamic_tanh"]


def dynamic_tanh(
    x: Tensor, alpha: Tensor | float, weight: Tensor | None = None, bias: Tensor | None = None
) -> Tensor:
    """Dynamic tanh (Zhu et al., 2025): an elementwise squashing with a learned scale.

    .. math:: y = w \\odot \\tanh(\\alpha x) + b

    No statistics are computed, so it costs one ``tanh`` and one fused ``addcmul``.

    Args:
        x: input of any shape.
        alpha: the scalar scale (a float or a one-element tensor, usually learned).
        weight, bias: optional, broadcast against ``x`` (e.g. ``(D,)`` for tokens
            ``(B, T, D)``, ``(C, 1, 1)`` for images ``(B, C, H, W)``).

    Shape:
        - x: ``(*)``; output: same, in ``x.dtype``.
    """
    if isinstance(alpha, Tensor) and alpha.numel() != 1:
        raise ValueError(f"alpha must be a scalar, got shape {tuple(alpha.shape)}")
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None:
            try:
                torch.broadcast_shapes(param.shape, x.shape)  # type: ignore[no-untyped-call]  # unannotated in torch
            except RuntimeError:
                raise ValueError(
                    f"{name} of shape {tuple(param.shape)} does not broadcast to {tuple(x.shape)}"
                ) from None
    alpha = alpha.reshape(()) if isinstance(alpha, Tensor) else alpha
    y = torch.tanh(x * alpha)
    if weight is not None and bias is not None:
        return torch.addcmul(bias, y, weight).to(x.dtype)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.to(x.dtype)

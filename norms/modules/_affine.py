"""The optional per-feature affine parameters the norm modules share."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["affine_parameter", "reset_affine"]


def affine_parameter(
    shape: int | tuple[int, ...],
    enabled: bool,
    device: torch.device | str | None,
    dtype: torch.dtype | None,
) -> nn.Parameter | None:
    """An uninitialised parameter of ``shape`` (filled by :func:`reset_affine`), or ``None``.

    Args:
        shape: the parameter's shape, e.g. ``num_features`` or a normalised shape.
        enabled: create it; ``None`` when ``False``.
        device, dtype: as torch's factory kwargs.
    """
    if not enabled:
        return None
    return nn.Parameter(torch.empty(shape, device=device, dtype=dtype))


def reset_affine(weight: nn.Parameter | None, bias: nn.Parameter | None) -> None:
    """Set ``weight`` to ones and ``bias`` to zeros in place; either may be ``None``."""
    if weight is not None:
        nn.init.ones_(weight)
    if bias is not None:
        nn.init.zeros_(bias)

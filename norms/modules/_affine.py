"""What the norm modules share: factory kwargs and the optional per-feature parameters."""

from __future__ import annotations

from typing import TypedDict

import torch
from torch import nn

__all__ = ["Device", "FactoryKwargs", "affine_parameter", "empty_parameter", "reset_affine"]

#: The ``device`` factory kwarg of every norm module.
Device = torch.device | str | None


class FactoryKwargs(TypedDict):
    """torch's ``factory_kwargs``, for passing ``device``/``dtype`` on to sub-modules."""

    device: Device
    dtype: torch.dtype | None


def affine_parameter(
    shape: int | tuple[int, ...],
    enabled: bool,
    device: Device,
    dtype: torch.dtype | None,
) -> nn.Parameter | None:
    """An uninitialised parameter of ``shape`` (filled by :func:`reset_affine`), or ``None``.

    Args:
        shape: the parameter's shape, e.g. ``num_features`` or a normalised shape.
        enabled: create it; ``None`` when ``False``.
        device, dtype: as torch's factory kwargs.
    """
    return empty_parameter(shape, device, dtype) if enabled else None


def empty_parameter(
    shape: int | tuple[int, ...], device: Device, dtype: torch.dtype | None
) -> nn.Parameter:
    """An uninitialised parameter of ``shape``; the module's ``reset_parameters`` fills it."""
    return nn.Parameter(torch.empty(shape, device=device, dtype=dtype))


def reset_affine(weight: nn.Parameter | None, bias: nn.Parameter | None) -> None:
    """Set ``weight`` to ones and ``bias`` to zeros in place; either may be ``None``."""
    if weight is not None:
        nn.init.ones_(weight)
    if bias is not None:
        nn.init.zeros_(bias)

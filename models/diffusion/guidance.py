"""Classifier-free guidance (Ho & Salimans 2022) as a wrapper around a denoiser."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from models.diffusion.samplers import Denoiser


def classifier_free_guidance(model: Denoiser, scale: float) -> Denoiser:
    """Wrap ``model`` so that it takes ``cond = (conditional, unconditional)``.

    .. math::
        \\hat\\epsilon = \\epsilon_u + w\\,(\\epsilon_c - \\epsilon_u)

    ``w = 1`` is the conditional prediction alone (the unconditional branch is skipped);
    ``w = 0`` is the unconditional one. The unconditional condition is the learned null
    condition, or a negative prompt that replaces it.
    """
    if scale < 0:
        raise ValueError(f"guidance scale must be >= 0, got {scale}")

    def guided(x: Tensor, t: Tensor, cond: tuple[Any, Any]) -> Tensor:
        conditional, unconditional = cond
        if scale == 1.0:
            return model(x, t, conditional)
        eps_uncond = model(x, t, unconditional)
        if scale == 0.0:
            return eps_uncond
        eps_cond = model(x, t, conditional)
        return eps_uncond + scale * (eps_cond - eps_uncond)

    return guided

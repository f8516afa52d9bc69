"""Classifier-free guidance (Ho & Salimans 2022) as a wrapper around a denoiser."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from models.control import concat_rows
from models.diffusion.samplers import Denoiser


def classifier_free_guidance(model: Denoiser, scale: float) -> Denoiser:
    """Wrap ``model`` so that it takes ``cond = (conditional, unconditional)``.

    .. math::
        \\hat\\epsilon = \\epsilon_u + w\\,(\\epsilon_c - \\epsilon_u)

    ``w = 1`` is the conditional prediction alone (the unconditional branch is skipped);
    ``w = 0`` is the unconditional one. Otherwise both branches run as *one* forward on
    the ``2B`` rows ``[x; x]`` with the conditions stacked by
    :func:`~models.control.concat_rows` (one launch sequence, larger matrices, instead
    of two); the rows do not interact, so this equals two forwards up to rounding. The
    unconditional condition is the learned null condition, or a negative prompt that
    replaces it. ``w`` is used as given: callers take it from resolved, checked options.
    """

    def guided(x: Tensor, t: Tensor, cond: tuple[Any, Any]) -> Tensor:
        conditional, unconditional = cond
        if scale == 1.0:
            return model(x, t, conditional)
        if scale == 0.0:
            return model(x, t, unconditional)
        both = model(x.repeat(2, *[1] * (x.dim() - 1)), t.repeat(2), concat_rows(cond))
        eps_cond, eps_uncond = both.chunk(2)
        return eps_uncond + scale * (eps_cond - eps_uncond)

    return guided

"""The training objective: epsilon prediction with uniformly drawn timesteps."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from models.diffusion.samplers import Denoiser
from models.diffusion.schedules import add_noise


def epsilon_loss(
    model: Denoiser,
    x0: Tensor,
    cond: Any,
    alpha_bar: Tensor,
    *,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Mean squared error of the predicted noise (Ho et al. 2020, "simple" loss).

    .. math::
        L = \\mathbb E_{t, \\epsilon}\\, \\lVert \\epsilon -
            \\epsilon_\\theta(\\sqrt{\\bar\\alpha_t} x_0 + \\sqrt{1-\\bar\\alpha_t}\\epsilon, t)
            \\rVert^2

    Shape:
        x0: ``(B, *)`` on any device; alpha_bar: ``(T,)``. Noise and timesteps are drawn
        on the CPU from ``generator`` (reproducible), then moved to ``x0.device``.
    """
    batch = x0.shape[0]
    t = torch.randint(0, alpha_bar.shape[0], (batch,), generator=generator)
    noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype).to(x0.device)
    alpha_bar_t = alpha_bar[t].to(x0.device)
    x_t = add_noise(x0, noise, alpha_bar_t)
    eps = model(x_t, t.to(x0.device), cond)
    return torch.nn.functional.mse_loss(eps.float(), noise.float())

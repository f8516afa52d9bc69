"""The training objective: regress the noise (or the velocity) at uniformly drawn timesteps."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from models.diffusion.process import Denoiser, add_noise, prediction_target


def diffusion_loss(
    model: Denoiser,
    x0: Tensor,
    cond: Any,
    alpha_bar: Tensor,
    *,
    prediction: str = "epsilon",
    generator: torch.Generator | None = None,
) -> Tensor:
    """Mean squared error of the prediction (Ho et al. 2020 "simple" loss for ``eps``).

    .. math::
        L = \\mathbb E_{t, \\epsilon}\\, \\lVert y - f_\\theta(\\sqrt{\\bar\\alpha_t} x_0
            + \\sqrt{1-\\bar\\alpha_t}\\epsilon, t) \\rVert^2,\\qquad
        y = \\epsilon \\text{ or } v = \\sqrt{\\bar\\alpha_t}\\epsilon - \\sqrt{1-\\bar\\alpha_t} x_0

    The ``v`` loss is the ``eps`` loss weighted by ``SNR + 1`` (Salimans & Ho 2022).

    Shape:
        x0: ``(B, *)`` on any device; alpha_bar: ``(T,)``. Noise and timesteps are drawn
        on the CPU from ``generator`` (reproducible), then moved to ``x0.device``.
    """
    batch = x0.shape[0]
    t = torch.randint(0, alpha_bar.shape[0], (batch,), generator=generator)
    noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype).to(x0.device)
    alpha_bar_t = alpha_bar[t].to(x0.device)
    x_t = add_noise(x0, noise, alpha_bar_t)
    output = model(x_t, t.to(x0.device), cond)
    target = prediction_target(x0, noise, alpha_bar_t, prediction)
    return torch.nn.functional.mse_loss(output.float(), target.float())

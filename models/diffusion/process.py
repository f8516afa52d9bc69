"""The noise process: schedules, the forward process, and what the network predicts of it.

A schedule is the vector ``alpha_bar`` of length ``T`` (float64), a pure function of the
number of timesteps; the forward process is

.. math::
    x_t = \\sqrt{\\bar\\alpha_t}\\, x_0 + \\sqrt{1 - \\bar\\alpha_t}\\, \\epsilon,
    \\qquad \\epsilon \\sim \\mathcal N(0, I),\\quad t = 0, \\dots, T-1,

with ``alpha_bar`` decreasing from close to 1 (t = 0) to close to 0 (t = T - 1).

The network predicts the noise ``eps`` or the velocity ``v`` (Salimans & Ho 2022). With
``a = sqrt(alpha_bar_t)``, ``s = sqrt(1 - alpha_bar_t)`` and ``x_t = a x0 + s eps``:

.. math::
    v = a\\,\\epsilon - s\\,x_0,\\qquad \\epsilon = s\\,x_t + a\\,v,\\qquad x_0 = a\\,x_t - s\\,v

Samplers always consume ``eps``; :func:`epsilon_model` adapts a ``v`` network. A ``v``
network keeps ``x0`` well conditioned at high noise, where ``eps``-prediction divides
its error by ``a`` (close to 0 at the end of the cosine schedule).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

#: A network ``model(x_t, t, cond)`` whose output the process reads (noise, ``x_0`` or
#: velocity, per its prediction): what the samplers call.
Denoiser = Callable[[Tensor, Tensor, Any], Tensor]


def _alpha_bar_from_betas(betas: Tensor) -> Tensor:
    return torch.cumprod(1.0 - betas, dim=0)


def linear_schedule(num_timesteps: int, beta_start: float = 1e-4, beta_end: float = 0.02) -> Tensor:
    """DDPM's linear betas (Ho et al. 2020), rescaled to ``num_timesteps``.

    Returns:
        ``alpha_bar`` of shape ``(T,)``, float64.
    """
    _check_timesteps(num_timesteps)
    scale = 1000.0 / num_timesteps
    betas = torch.linspace(beta_start * scale, beta_end * scale, num_timesteps, dtype=torch.float64)
    return _alpha_bar_from_betas(betas)


def cosine_schedule(num_timesteps: int, offset: float = 0.008, max_beta: float = 0.999) -> Tensor:
    """Improved-DDPM cosine schedule (Nichol & Dhariwal 2021).

    .. math::
        f(t) = \\cos^2\\Big(\\frac{t/T + s}{1 + s} \\frac{\\pi}{2}\\Big),\\quad
        \\beta_t = \\min\\big(1 - f(t+1)/f(t),\\ \\beta_{max}\\big)

    Returns:
        ``alpha_bar`` of shape ``(T,)``, float64.
    """
    _check_timesteps(num_timesteps)
    steps = torch.arange(num_timesteps + 1, dtype=torch.float64) / num_timesteps
    f = torch.cos((steps + offset) / (1 + offset) * math.pi / 2) ** 2
    betas = (1 - f[1:] / f[:-1]).clamp(max=max_beta)
    return _alpha_bar_from_betas(betas)


SCHEDULES: dict[str, Callable[[int], Tensor]] = {
    "cosine": cosine_schedule,
    "linear": linear_schedule,
}


def get_schedule(name: str, num_timesteps: int) -> Tensor:
    """``alpha_bar`` of the schedule called ``name``; a miss lists the valid names."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose from {sorted(SCHEDULES)}")
    return SCHEDULES[name](num_timesteps)


def sampling_timesteps(num_timesteps: int, steps: int) -> list[int]:
    """``steps`` integer timesteps evenly spaced from ``T - 1`` down to 0, descending."""
    _check_timesteps(num_timesteps)
    if not 1 <= steps <= num_timesteps:
        raise ValueError(f"steps must be in [1, {num_timesteps}], got {steps}")
    grid = torch.linspace(num_timesteps - 1, 0, steps, dtype=torch.float64).round().long()
    return grid.tolist()


def add_noise(x0: Tensor, noise: Tensor, alpha_bar_t: Tensor) -> Tensor:
    """Sample the forward process ``q(x_t | x_0)``.

    Shape:
        x0, noise: ``(B, *)``; alpha_bar_t: ``(B,)``.
    """
    shape = (-1,) + (1,) * (x0.dim() - 1)
    a = alpha_bar_t.sqrt().to(x0.dtype).view(shape)
    s = (1 - alpha_bar_t).sqrt().to(x0.dtype).view(shape)
    return a * x0 + s * noise


class ScheduleOnDevice:
    """A schedule's copy on each device it is asked for, made once per device.

    The denoiser wrappers index ``alpha_bar`` by the timesteps of every model call; a
    float64 host tensor would be copied to the GPU (from pageable memory, waiting for it)
    on every call.
    """

    def __init__(self, alpha_bar: Tensor) -> None:
        self.alpha_bar = alpha_bar
        self._copies: dict[torch.device, Tensor] = {alpha_bar.device: alpha_bar}

    def __call__(self, device: torch.device) -> Tensor:
        """``alpha_bar`` on ``device``."""
        copy = self._copies.get(device)
        if copy is None:
            copy = self._copies[device] = self.alpha_bar.to(device)
        return copy


def _check_timesteps(num_timesteps: int) -> None:
    if num_timesteps < 1:
        raise ValueError(f"num_timesteps must be >= 1, got {num_timesteps}")


# ------------------------------------------------------------- what the network predicts

PREDICTIONS = ("epsilon", "v")


def check_prediction(prediction: str) -> str:
    if prediction not in PREDICTIONS:
        raise ValueError(f"unknown prediction {prediction!r}; choose from {list(PREDICTIONS)}")
    return prediction


def _coefficients(alpha_bar_t: Tensor, like: Tensor) -> tuple[Tensor, Tensor]:
    shape = (-1,) + (1,) * (like.dim() - 1)
    ab = alpha_bar_t.to(device=like.device, dtype=like.dtype).view(shape)
    return ab.sqrt(), (1 - ab).sqrt()


def prediction_target(x0: Tensor, noise: Tensor, alpha_bar_t: Tensor, prediction: str) -> Tensor:
    """The regression target for ``prediction`` (``eps``, or ``v = a eps - s x0``)."""
    if check_prediction(prediction) == "epsilon":
        return noise
    a, s = _coefficients(alpha_bar_t, x0)
    return a * noise - s * x0


def to_epsilon(output: Tensor, x_t: Tensor, alpha_bar_t: Tensor, prediction: str) -> Tensor:
    """Convert a network output to ``eps`` (``eps = s x_t + a v`` for ``v``)."""
    if check_prediction(prediction) == "epsilon":
        return output
    a, s = _coefficients(alpha_bar_t, x_t)
    return s * x_t + a * output


def to_x0(output: Tensor, x_t: Tensor, alpha_bar_t: Tensor, prediction: str) -> Tensor:
    """The network's estimate of the clean image: ``x0 = a x_t - s v`` for ``v``,
    ``x0 = (x_t - s eps) / a`` for ``eps`` (ill-conditioned where ``a`` is near 0)."""
    a, s = _coefficients(alpha_bar_t, x_t)
    if check_prediction(prediction) == "epsilon":
        return (x_t - s * output) / a
    return a * x_t - s * output


def epsilon_model(model: Denoiser, alpha_bar: Tensor, prediction: str) -> Denoiser:
    """Wrap ``model(x, t, cond)`` predicting ``prediction`` into an ``eps`` predictor."""
    if check_prediction(prediction) == "epsilon":
        return model
    schedule = ScheduleOnDevice(alpha_bar)

    def wrapped(x: Tensor, t: Tensor, cond: Any) -> Tensor:
        alpha_bar_t = schedule(t.device)[t]
        return to_epsilon(model(x, t, cond), x, alpha_bar_t, prediction)

    return wrapped

"""What the network predicts: the noise ``eps`` or the velocity ``v`` (Salimans & Ho 2022).

With ``a = sqrt(alpha_bar_t)``, ``s = sqrt(1 - alpha_bar_t)`` and ``x_t = a x0 + s eps``:

.. math::
    v = a\\,\\epsilon - s\\,x_0,\\qquad \\epsilon = s\\,x_t + a\\,v,\\qquad x_0 = a\\,x_t - s\\,v

Samplers always consume ``eps``; :func:`epsilon_model` adapts a ``v`` network. A ``v``
network keeps ``x0`` well conditioned at high noise, where ``eps``-prediction divides
its error by ``a`` (close to 0 at the end of the cosine schedule).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from models.diffusion.samplers import Denoiser
from models.diffusion.schedules import ScheduleOnDevice

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

"""Samplers: DDPM ancestral, deterministic DDIM and DPM-Solver++(2M).

A sampler knows the model only as a callable ``model(x, t, cond) -> eps``: ``x`` is the
noisy batch ``(B, *)``, ``t`` the integer timesteps ``(B,)`` (long), ``cond`` whatever the
caller passes (handed through untouched). Every sampler walks the timesteps returned by
:func:`~models.diffusion.process.sampling_timesteps` and ends with one last jump to
clean data (``alpha_bar = 1``), so ``steps`` is exactly the number of model calls.

Every sampler takes an optional ``control`` (:class:`~models.control.StepControl`):
asked before each step, it may drop rows from the batch (a cancelled image), and the
sampler goes on with the others: ``x``, ``cond``, the per-row generators and its own
state shrink together, and the result has the kept rows only. A control with a ``show``
hook (:data:`~models.control.ShowImages`) is shown ``x0_hat`` after each step but the
last (the estimate of the clean sample; never computed for it, only handed over).

No step reads anything back from the device: the timestep grid and its coefficients are
Python numbers computed before the loop, and the noise comes from generators on the
batch's device (:func:`~models.diffusion.random.randn`), so a CUDA sampler queues its
steps without waiting (``benchmarks/gpu_check.py`` counts the syncs per step).

A sampler runs under the caller's autograd mode: the pipeline that calls it
(``TextToImage.sample``) runs it under ``torch.inference_mode``.

Notation: ``a_t = sqrt(alpha_bar_t)``, ``s_t = sqrt(1 - alpha_bar_t)``,
``x0_hat = (x_t - s_t eps) / a_t``.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

import torch
from torch import Tensor

from models.control import ShowImages, StepControl, image_hook, take_rows, wanted_rows
from models.diffusion.process import Denoiser, sampling_timesteps
from models.diffusion.random import Generators, randn


def _predict(
    model: Denoiser, x: Tensor, t: int, cond: Any, alpha_bar_t: float, clip: bool
) -> tuple[Tensor, Tensor]:
    """Run the model at timestep ``t``; return ``(eps, x0_hat)`` (eps recomputed if clipped)."""
    timesteps = torch.full((x.shape[0],), t, dtype=torch.long, device=x.device)
    eps = model(x, timesteps, cond).to(x.dtype)
    a, s = math.sqrt(alpha_bar_t), math.sqrt(1.0 - alpha_bar_t)
    x0 = (x - s * eps) / a
    if clip:
        x0 = x0.clamp(-1.0, 1.0)
        eps = (x - a * x0) / s
    return eps, x0


def _pairs(alpha_bar: Tensor, steps: int) -> list[tuple[int, float, float]]:
    """``(t, alpha_bar_t, alpha_bar_next)`` along the grid; the last ``alpha_bar_next`` is 1.

    Read to the host once, before the first step (one copy if ``alpha_bar`` lives on a
    GPU): the per-step coefficients are then Python floats, and no step waits on the GPU.
    """
    grid = sampling_timesteps(alpha_bar.shape[0], steps)
    values = alpha_bar.detach().to("cpu", torch.float64)[grid].tolist() + [1.0]
    return [(t, values[i], values[i + 1]) for i, t in enumerate(grid)]


_State = TypeVar("_State", bound=tuple[Any, ...])


def _show(show: ShowImages | None, done: int, total: int, x0: Tensor) -> None:
    """Hand the estimate ``x0`` after ``done`` of ``total`` steps to ``show``, if any."""
    if show is not None and done < total:
        show(done, total, lambda: x0)


def _controlled(control: StepControl | None, done: int, total: int, state: _State) -> _State:
    """``state`` (per-row values, batch first) restricted to the rows ``control`` keeps."""
    rows = wanted_rows(control, done, total)
    if rows is None:
        return state
    kept: _State = take_rows(state, rows)  # a tuple of the same kind
    return kept


class Sampler:
    """The loop every sampler shares, around its own update (:meth:`update`).

    Before each step ``control`` may drop rows (``x``, ``cond`` and the state the sampler
    carries shrink together); then the model gives ``eps`` and ``x0_hat`` at ``t``, the
    control's ``show`` hook sees ``x0_hat``, and :meth:`update` moves ``x`` from
    ``alpha_bar_t`` to the next grid point ``alpha_bar_s``.
    """

    #: the step to clean data (``alpha_bar_s = 1``) returns ``x0_hat`` and ends the loop
    ends_on_x0 = False

    def __call__(
        self,
        model: Denoiser,
        x: Tensor,
        cond: Any,
        alpha_bar: Tensor,
        *,
        steps: int,
        generator: Generators = None,
        clip_denoised: bool = False,
        control: StepControl | None = None,
    ) -> Tensor:
        """Sample from ``x``.

        Args:
            x: the starting noise ``x_T``, ``(B, *)``.
            alpha_bar: the schedule, ``(T,)``.
            steps: model evaluations (the grid is a subsequence when ``steps < T``).
            generator: one generator, or one per batch item, for the added noise (a
                sampler that draws none accepts it for a uniform signature).
            clip_denoised: clamp ``x0_hat`` to ``[-1, 1]`` (for images).
            control: asked before each step which rows go on (see the module docstring).
        """
        pairs = _pairs(alpha_bar, steps)
        show = image_hook(control)
        carried = self.start(generator)
        for i, (t, ab_t, ab_s) in enumerate(pairs):
            x, cond, carried = _controlled(control, i, len(pairs), (x, cond, carried))
            if x.shape[0] == 0:
                return x
            eps, x0 = _predict(model, x, t, cond, ab_t, clip_denoised)
            _show(show, i + 1, len(pairs), x0)
            if self.ends_on_x0 and ab_s >= 1.0:
                x = x0
                break
            x, carried = self.update(x, eps, x0, ab_t, ab_s, carried)
        (x,) = _controlled(control, len(pairs), len(pairs), (x,))
        return x

    def start(self, generator: Generators) -> Any:
        """The state carried from step to step (per-row values are dropped with their
        rows, see :func:`~models.control.take_rows`); none by default."""
        return None

    def update(
        self, x: Tensor, eps: Tensor, x0: Tensor, ab_t: float, ab_s: float, carried: Any
    ) -> tuple[Tensor, Any]:
        """``x_s`` from ``x_t`` and the prediction; the state carried to the next step."""
        raise NotImplementedError


class DDPM(Sampler):
    """Ancestral sampling from the DDPM posterior ``q(x_s | x_t, x0_hat)`` (Ho et al. 2020).

    With ``b = 1 - alpha_bar_t / alpha_bar_s`` (the effective beta between the two
    timesteps of the grid):

    .. math::
        \\mu = \\frac{\\sqrt{\\bar\\alpha_s}\\, b}{1 - \\bar\\alpha_t} \\hat x_0
             + \\frac{\\sqrt{1 - b}\\,(1 - \\bar\\alpha_s)}{1 - \\bar\\alpha_t} x_t,\\qquad
        \\sigma^2 = \\frac{1 - \\bar\\alpha_s}{1 - \\bar\\alpha_t} b

    The noise is drawn from ``generator`` (the state it carries: one per row follows its
    row).
    """

    def start(self, generator: Generators) -> Generators:
        return generator

    def update(
        self, x: Tensor, eps: Tensor, x0: Tensor, ab_t: float, ab_s: float, carried: Any
    ) -> tuple[Tensor, Generators]:
        b = 1.0 - ab_t / ab_s
        mean = (math.sqrt(ab_s) * b / (1 - ab_t)) * x0 + (
            math.sqrt(1 - b) * (1 - ab_s) / (1 - ab_t)
        ) * x
        var = (1 - ab_s) / (1 - ab_t) * b
        if var > 0:
            mean = mean + math.sqrt(var) * randn(x.shape, carried, device=x.device, dtype=x.dtype)
        return mean, carried


class DDIM(Sampler):
    """Deterministic DDIM (Song et al. 2021, ``eta = 0``): the first-order step of the
    probability-flow ODE.

    .. math::
        x_s = \\sqrt{\\bar\\alpha_s}\\,\\hat x_0 + \\sqrt{1 - \\bar\\alpha_s}\\,\\hat\\epsilon

    It draws no noise.
    """

    def update(
        self, x: Tensor, eps: Tensor, x0: Tensor, ab_t: float, ab_s: float, carried: Any
    ) -> tuple[Tensor, None]:
        return math.sqrt(ab_s) * x0 + math.sqrt(1 - ab_s) * eps, None


class DPMSolverPP2M(Sampler):
    """DPM-Solver++(2M), the multistep second-order data-prediction solver (Lu et al. 2022).

    With ``lambda = log(a / s)`` and ``h_i = lambda_{i+1} - lambda_i``:

    .. math::
        x_{i+1} = \\frac{s_{i+1}}{s_i} x_i - a_{i+1}(e^{-h_i} - 1) D_i,\\qquad
        D_i = (1 + \\tfrac{1}{2r_i})\\hat x_0^{(i)} - \\tfrac{1}{2r_i}\\hat x_0^{(i-1)},
        \\ r_i = h_{i-1} / h_i

    The first step is first order (``D_0 = x0_hat``) and so is the final jump to clean
    data, which returns ``x0_hat``. It carries the previous step's ``x0_hat`` and ``h``,
    and draws no noise.
    """

    ends_on_x0 = True

    def start(self, generator: Generators) -> tuple[Tensor | None, float | None]:
        return None, None

    def update(
        self, x: Tensor, eps: Tensor, x0: Tensor, ab_t: float, ab_s: float, carried: Any
    ) -> tuple[Tensor, tuple[Tensor, float]]:
        previous_x0, previous_h = carried
        a_t, s_t = math.sqrt(ab_t), math.sqrt(1 - ab_t)
        a_s, s_s = math.sqrt(ab_s), math.sqrt(1 - ab_s)
        h = math.log(a_s / s_s) - math.log(a_t / s_t)
        direction = x0
        if previous_x0 is not None and previous_h is not None:  # set together
            r = previous_h / h
            direction = (1 + 1 / (2 * r)) * x0 - (1 / (2 * r)) * previous_x0
        return (s_s / s_t) * x - a_s * math.expm1(-h) * direction, (x0, h)


ddpm = DDPM()
ddim = DDIM()
dpm_solver_pp_2m = DPMSolverPP2M()

#: Samplers by the name the CLI and the HTTP API use.
SAMPLERS: dict[str, Sampler] = {"ddpm": ddpm, "ddim": ddim, "dpm++2m": dpm_solver_pp_2m}


def get_sampler(name: str) -> Sampler:
    """The sampler called ``name``; a miss lists the valid names."""
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; choose from {sorted(SAMPLERS)}")
    return SAMPLERS[name]

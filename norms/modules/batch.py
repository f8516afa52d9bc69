"""Batch-statistics modules: BatchNorm (with ``eval_mix``), GhostBatchNorm, BatchRenorm.

They share :class:`RunningStatsNorm`: per-channel affine ``weight``/``bias``, the running
buffers ``running_mean``/``running_var``/``num_batches_tracked`` (same names as torch's
``BatchNorm*d``, so their state dicts load both ways), ``momentum=None`` as a cumulative
average and ``track_running_stats=False`` for batch statistics in both modes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from norms.functional import _args
from norms.functional import batch as fb
from norms.modules._affine import Device, affine_parameter, reset_affine
from norms.registry import register

__all__ = ["BatchNorm", "BatchRenorm", "GhostBatchNorm"]


class RunningStatsNorm(nn.Module):
    """Base for norms with per-channel affine parameters and running statistics.

    The public subclasses own the keyword-only signatures and their defaults and pass
    the common options here in this order.

    Args:
        num_features: channels ``C``.
        eps: added to the variance.
        momentum: weight of each new batch in the running averages, in [0, 1]; ``None``
            for a cumulative (equal-weight) average, ``1 / num_batches_tracked``.
        affine: learn ``weight`` (ones) and ``bias`` (zeros) of shape ``(C,)``.
        track_running_stats: keep running buffers and use them in eval; when ``False``
            batch statistics are used in both modes and the buffers are ``None``.
        device, dtype: of the parameters and floating buffers, as torch's factory kwargs
            (``num_batches_tracked`` stays ``torch.long``).
        stats_shape: the buffers' shape, ``(C,)`` unless a subclass keeps more.
    """

    weight: nn.Parameter | None
    bias: nn.Parameter | None
    running_mean: Tensor | None
    running_var: Tensor | None
    num_batches_tracked: Tensor | None

    def __init__(
        self,
        num_features: int,
        eps: float,
        momentum: float | None,
        affine: bool,
        track_running_stats: bool,
        device: Device,
        dtype: torch.dtype | None,
        stats_shape: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__()
        _args.positive_int("num_features", num_features)
        _args.eps(eps, positive=True)
        _args.momentum(momentum)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.register_parameter("weight", affine_parameter(num_features, affine, device, dtype))
        self.register_parameter("bias", affine_parameter(num_features, affine, device, dtype))
        if track_running_stats:
            shape = stats_shape or (num_features,)
            self.register_buffer("running_mean", torch.zeros(shape, device=device, dtype=dtype))
            self.register_buffer("running_var", torch.ones(shape, device=device, dtype=dtype))
            self.register_buffer(
                "num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device)
            )
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        """Running mean 0, running variance 1, batch count 0."""
        if self.track_running_stats:
            running_mean, running_var, num_batches_tracked = self._tracked_buffers()
            running_mean.zero_()
            running_var.fill_(1.0)
            num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        """Reset the running statistics, ``weight`` to ones and ``bias`` to zeros."""
        self.reset_running_stats()
        reset_affine(self.weight, self.bias)

    def _step(self) -> tuple[bool, float]:
        """This forward's ``(batch_stats, momentum)``; counts the batch when it updates.

        Batch statistics in training and whenever running statistics are not tracked.
        The functional norms get ``running_mean``/``running_var`` as they are: updated
        in place in training, read in eval, ``None`` when not tracked.
        """
        return self.training or not self.track_running_stats, self._step_momentum()

    def _batch_norm_args(
        self,
    ) -> tuple[Tensor | None, Tensor | None, Tensor | None, Tensor | None, bool, float, float]:
        """This forward's ``(running_mean, running_var, weight, bias, training, momentum, eps)``.

        The trailing arguments of :func:`norms.functional.batch_norm`, in its order, which
        ghost and sequence batch norm share; counts the batch (see :meth:`_step`).
        """
        batch_stats, momentum = self._step()
        running_mean, running_var = self.running_mean, self.running_var
        return running_mean, running_var, self.weight, self.bias, batch_stats, momentum, self.eps

    def _step_momentum(self) -> float:
        """This step's averaging factor; counts the batch when the buffers are updated."""
        if not (self.training and self.track_running_stats):
            return 0.0 if self.momentum is None else self.momentum
        num_batches_tracked = self._tracked_buffers()[2]
        num_batches_tracked.add_(1)
        if self.momentum is None:
            return 1.0 / float(num_batches_tracked)
        return self.momentum

    def _tracked_buffers(self) -> tuple[Tensor, Tensor, Tensor]:
        """``running_mean``, ``running_var``, ``num_batches_tracked``; with running stats."""
        running_mean, running_var = self.running_mean, self.running_var
        num_batches_tracked = self.num_batches_tracked
        assert running_mean is not None and running_var is not None  # track_running_stats
        assert num_batches_tracked is not None
        return running_mean, running_var, num_batches_tracked

    def _check_input(self, x: Tensor, min_dim: int = 2) -> None:
        if x.dim() < min_dim or x.shape[1] != self.num_features:
            raise ValueError(
                f"expected (B, {self.num_features}, ...) with at least {min_dim} dims, "
                f"got {tuple(x.shape)}"
            )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )


@register("batch")
class BatchNorm(RunningStatsNorm):
    """Batch normalization for inputs of any rank, channels at dim 1.

    .. math:: y = \\frac{x - \\mathrm{E}[x]}{\\sqrt{\\mathrm{Var}[x] + \\epsilon}}\\gamma + \\beta

    Statistics per channel over the batch and every trailing dim; one module replaces
    torch's ``BatchNorm1d/2d/3d`` (same parameter and buffer names). In eval, ``eval_mix
    = a > 0`` switches on Summers & Dinneen's inference example weighing
    (:func:`norms.functional.batch_norm_eval_mix`): ``mu = a E_B[x] + (1 - a) mu_train``,
    ``var = a E_B[x^2] + (1 - a) E_train[x^2] - mu^2`` with ``E_train[x^2] =
    running_var + running_mean^2`` (exposed as :attr:`running_sq_mean`); ``a = 0`` is
    plain eval batch norm.

    Args:
        num_features: channels ``C``.
        eps, momentum, affine, track_running_stats, device, dtype: see
            :class:`RunningStatsNorm`.
        eval_mix: ``a`` in [0, 1]; used only in eval with running statistics.

    Shape:
        - input: ``(B, C, *)``; output: same shape and dtype.
    """

    def __init__(
        self,
        num_features: int,
        *,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        eval_mix: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        _args.real("eval_mix", eval_mix, low=0.0, high=1.0)
        if eval_mix and not track_running_stats:
            raise ValueError("eval_mix needs running statistics (track_running_stats=True)")
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.eval_mix = eval_mix

    @property
    def running_sq_mean(self) -> Tensor | None:
        """``E_train[x^2] = running_var + running_mean^2``, the second moment the buffers hold."""
        if not self.track_running_stats:
            return None
        running_mean, running_var, _ = self._tracked_buffers()
        return running_var + running_mean**2

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        if self.eval_mix and not self.training:  # eval_mix implies running statistics
            running_mean, running_var, _ = self._tracked_buffers()
            return fb.batch_norm_eval_mix(
                x, running_mean, running_var, self.eval_mix, self.weight, self.bias, self.eps
            )
        return fb.batch_norm(x, *self._batch_norm_args())

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", eval_mix={self.eval_mix}" if self.eval_mix else "")


@register("ghost_batch")
class GhostBatchNorm(RunningStatsNorm):
    """Ghost batch normalization: batch statistics per virtual sub-batch.

    Training normalises each run of ``virtual_batch_size`` consecutive samples by its
    own moments; parameters and running statistics are shared (one running update per
    step with the virtual batches' averaged moments). Eval is plain batch norm. See
    :func:`norms.functional.ghost_batch_norm`.

    Args:
        num_features: channels ``C``.
        virtual_batch_size: samples per virtual batch (must divide the batch).
        eps, momentum, affine, track_running_stats, device, dtype: see
            :class:`RunningStatsNorm`.

    Shape:
        - input: ``(B, C, *)``; output: same shape and dtype.
    """

    def __init__(
        self,
        num_features: int,
        *,
        virtual_batch_size: int = 32,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if _args.positive_int("virtual_batch_size", virtual_batch_size) < 2:
            raise ValueError(f"virtual_batch_size must be an int >= 2, got {virtual_batch_size}")
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.virtual_batch_size = virtual_batch_size

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        # In eval (with running statistics) this is plain batch norm.
        return fb.ghost_batch_norm(x, self.virtual_batch_size, *self._batch_norm_args())

    def extra_repr(self) -> str:
        return super().extra_repr() + f", virtual_batch_size={self.virtual_batch_size}"


@register("batch_renorm")
class BatchRenorm(RunningStatsNorm):
    """Batch renormalization: batch norm corrected towards the running statistics.

    .. math:: y = \\gamma\\Big(\\frac{x - \\mu_B}{\\sigma_B} r + d\\Big) + \\beta

    with ``r = clip(sigma_B / sigma, 1/r_max, r_max)`` and ``d = clip((mu_B - mu) /
    sigma, -d_max, d_max)`` held constant in the backward pass. The paper warms
    ``r_max`` up from 1 and ``d_max`` up from 0; both are plain attributes a training
    loop may change. Always tracks running statistics (``r``/``d`` need them). See
    :func:`norms.functional.batch_renorm`.

    Args:
        num_features: channels ``C``.
        r_max: ``>= 1``.
        d_max: ``>= 0``.
        eps, momentum, affine, device, dtype: see :class:`RunningStatsNorm`.

    Shape:
        - input: ``(B, C, *)``; output: same shape and dtype.
    """

    def __init__(
        self,
        num_features: int,
        *,
        r_max: float = 3.0,
        d_max: float = 5.0,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        _args.real("r_max", r_max, low=1.0)
        _args.real("d_max", d_max, low=0.0)
        super().__init__(num_features, eps, momentum, affine, True, device, dtype)
        self.r_max, self.d_max = r_max, d_max

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        momentum = self._step_momentum()
        running_mean, running_var, _ = self._tracked_buffers()
        return fb.batch_renorm(
            x,
            running_mean,
            running_var,
            self.weight,
            self.bias,
            self.training,
            momentum,
            self.eps,
            self.r_max,
            self.d_max,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, r_max={self.r_max}, d_max={self.d_max}"
        )

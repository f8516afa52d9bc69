"""Per-sample normalization modules: LayerNorm, RMSNorm, LpNorm, GroupNorm, InstanceNorm."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from norms.functional import layer as fl
from norms.registry import register

__all__ = ["GroupNorm", "InstanceNorm", "LayerNorm", "LpNorm", "RMSNorm"]


def _shape(num_features: int | Sequence[int]) -> tuple[int, ...]:
    shape = (num_features,) if isinstance(num_features, int) else tuple(num_features)
    if not shape or any(s <= 0 for s in shape):
        raise ValueError(f"num_features must be positive, got {num_features}")
    return shape


def _check(eps: float, **positive: float) -> None:
    if not eps >= 0:
        raise ValueError(f"eps must be non-negative, got {eps}")
    for name, value in positive.items():
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")


class _TrailingNorm(nn.Module):
    """Common state of the norms over trailing dims: shape, eps, optional affine."""

    def __init__(
        self, num_features: int | Sequence[int], eps: float, weight: bool, bias: bool
    ) -> None:
        super().__init__()
        _check(eps)
        self.normalized_shape, self.eps = _shape(num_features), eps
        self.weight = nn.Parameter(torch.empty(self.normalized_shape)) if weight else None
        self.bias = nn.Parameter(torch.empty(self.normalized_shape)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"weight={self.weight is not None}, bias={self.bias is not None}"
        )


@register("layer")
class LayerNorm(_TrailingNorm):
    """Layer normalization over the trailing ``num_features`` dims.

    .. math:: y = \\frac{x - \\mathrm{E}[x]}{\\sqrt{\\mathrm{Var}[x] + \\epsilon}} \\odot w + b

    Args:
        num_features: the normalised trailing shape (an int: the last dim).
        eps: added to the biased variance.
        elementwise_affine: learn ``w`` (ones) and, with ``bias``, ``b`` (zeros).
        bias: learn ``b`` when ``elementwise_affine``.

    Shape:
        - x: ``(*, *num_features)``; output: same.
    """

    def __init__(
        self,
        num_features: int | Sequence[int],
        *,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__(num_features, eps, elementwise_affine, elementwise_affine and bias)

    def forward(self, x: Tensor) -> Tensor:
        return fl.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


@register("rms")
class RMSNorm(_TrailingNorm):
    """Root-mean-square normalization over the trailing ``num_features`` dims.

    .. math:: y = \\frac{x}{\\sqrt{\\mathrm{E}[x^2] + \\epsilon}} \\odot w

    Args:
        num_features: the normalised trailing shape.
        eps: added to the mean of squares.
        elementwise_affine: learn ``w`` (ones).

    Shape:
        - x: ``(*, *num_features)``; output: same.
    """

    def __init__(
        self,
        num_features: int | Sequence[int],
        *,
        eps: float = 1e-6,
        elementwise_affine: bool = True,
    ) -> None:
        super().__init__(num_features, eps, elementwise_affine, False)

    def forward(self, x: Tensor) -> Tensor:
        return fl.rms_norm(x, self.normalized_shape, self.weight, self.eps)


@register("lp")
class LpNorm(_TrailingNorm):
    """Lp (power) normalization: divide by the ``p``-mean of ``|x|`` over trailing dims.

    .. math:: y = \\frac{x}{\\left(\\mathrm{E}[|x|^p] + \\epsilon\\right)^{1/p}} \\odot w + b

    ``LpNorm(D, p=2, bias=False)`` is ``RMSNorm(D)``.

    Args:
        num_features: the normalised trailing shape.
        p: the power (finite, positive).
        eps: added to the power mean.
        elementwise_affine: learn ``w`` and, with ``bias``, ``b``.
        bias: learn ``b`` when ``elementwise_affine``.

    Shape:
        - x: ``(*, *num_features)``; output: same.
    """

    def __init__(
        self,
        num_features: int | Sequence[int],
        *,
        p: float = 2.0,
        eps: float = 1e-6,
        elementwise_affine: bool = True,
        bias: bool = True,
    ) -> None:
        if not (math.isfinite(p) and p > 0):
            raise ValueError(f"p must be a finite positive number, got {p}")
        super().__init__(num_features, eps, elementwise_affine, elementwise_affine and bias)
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return fl.lp_norm(x, self.p, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, p={self.p}"


class _ChannelNorm(nn.Module):
    """Common state of the per-channel-affine norms on ``(B, C, *)`` inputs."""

    def __init__(self, num_features: int, eps: float, affine: bool) -> None:
        super().__init__()
        _check(eps, num_features=num_features)
        self.num_features, self.eps, self.affine = num_features, eps, affine
        self.weight = nn.Parameter(torch.empty(num_features)) if affine else None
        self.bias = nn.Parameter(torch.empty(num_features)) if affine else None

    def reset_parameters(self) -> None:
        if self.affine:
            nn.init.ones_(self.weight)
            nn.init.zeros_(self.bias)

    def _check_input(self, x: Tensor) -> None:
        if x.dim() < 2 or x.shape[1] != self.num_features:
            raise ValueError(f"expected (B, {self.num_features}, *), got {tuple(x.shape)}")


@register("group")
class GroupNorm(_ChannelNorm):
    """Group normalization: per-sample statistics over each group of channels.

    .. math:: y = \\frac{x - \\mathrm{E}_g[x]}{\\sqrt{\\mathrm{Var}_g[x] + \\epsilon}}
              \\odot w_c + b_c

    ``GroupNorm(C, num_groups=C)`` is :class:`InstanceNorm` (affine);
    ``GroupNorm(C, num_groups=1)`` is layer norm over ``(C, *spatial)``.

    Args:
        num_features: channels ``C``.
        num_groups: divides ``C`` (default 32, as in Wu & He).
        eps: added to the biased variance.
        affine: learn per-channel ``w`` (ones) and ``b`` (zeros).

    Shape:
        - x: ``(B, C, *)``; output: same.
    """

    def __init__(
        self, num_features: int, *, num_groups: int = 32, eps: float = 1e-5, affine: bool = True
    ) -> None:
        super().__init__(num_features, eps, affine)
        if num_groups <= 0 or num_features % num_groups:
            raise ValueError(
                f"num_groups must be positive and divide num_features={num_features}, "
                f"got {num_groups}"
            )
        self.num_groups = num_groups
        self.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        return fl.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, num_groups={self.num_groups}, eps={self.eps}, affine={self.affine}"


@register("instance")
class InstanceNorm(_ChannelNorm):
    """Instance normalization, for any number of spatial dims, with optional running stats.

    .. math:: y = \\frac{x - \\mathrm{E}_{s}[x]}{\\sqrt{\\mathrm{Var}_{s}[x] + \\epsilon}}
              \\odot w_c + b_c

    With ``track_running_stats`` the module keeps ``running_mean`` / ``running_var``
    (batch-averaged per-instance mean and unbiased variance, exponential average with
    ``momentum``) and, in eval mode, normalises with them instead of the input's
    statistics, like ``torch.nn.InstanceNorm2d(track_running_stats=True)``.

    Args:
        num_features: channels ``C``.
        eps: added to the variance.
        momentum: running-average factor in ``[0, 1]``.
        affine: learn per-channel ``w`` and ``b`` (off by default, as in torch).
        track_running_stats: keep running statistics and use them in eval mode.

    Shape:
        - x: ``(B, C, *spatial)``; output: same.
    """

    def __init__(
        self,
        num_features: int,
        *,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
    ) -> None:
        super().__init__(num_features, eps, affine)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must lie in [0, 1], got {momentum}")
        self.momentum, self.track_running_stats = momentum, track_running_stats
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features))
            self.register_buffer("running_var", torch.ones(num_features))
        else:
            self.running_mean = self.running_var = None
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1.0)

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        super().reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        use_input_stats = self.training or not self.track_running_stats
        track = self.training and self.track_running_stats
        return fl.instance_norm(
            x,
            self.weight,
            self.bias,
            self.eps,
            running_mean=self.running_mean if track or not use_input_stats else None,
            running_var=self.running_var if track or not use_input_stats else None,
            use_input_stats=use_input_stats,
            momentum=self.momentum,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )

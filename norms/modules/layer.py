"""Per-sample normalization modules: LayerNorm, RMSNorm, LpNorm, GroupNorm, InstanceNorm."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from norms.functional import _args
from norms.functional import layer as fl
from norms.modules._affine import Device, affine_parameter, reset_affine
from norms.modules.batch import RunningStatsNorm
from norms.registry import register

__all__ = ["GroupNorm", "InstanceNorm", "LayerNorm", "LpNorm", "RMSNorm"]


def _shape(num_features: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(num_features, int) and not isinstance(num_features, bool):
        return (_args.positive_int("num_features", num_features),)
    if not isinstance(num_features, Sequence) or not num_features:
        raise ValueError(f"num_features must be a positive int or shape, got {num_features!r}")
    return tuple(_args.positive_int("num_features", size) for size in num_features)


class _TrailingNorm(nn.Module):
    """Common state of the norms over trailing dims: shape, eps, optional affine.

    ``weight`` exists with ``elementwise_affine``, ``bias`` with both flags.

    With ``channels_first`` the single normalised dim is dim 1 of a ``(B, C, *)`` input
    (the layout of timm's ``LayerNorm2d`` / torchvision's ``LayerNorm2d``): the input is
    viewed channels-last, normalised over its last dim and viewed back.
    """

    def __init__(
        self,
        num_features: int | Sequence[int],
        eps: float | None,
        elementwise_affine: bool,
        bias: bool,
        channels_first: bool,
        device: Device,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _shape(num_features)
        if channels_first and len(self.normalized_shape) != 1:
            raise ValueError(
                f"channels_first normalises one dim (C,), got num_features={num_features!r}"
            )
        self.eps, self.channels_first = eps, channels_first
        shape = self.normalized_shape
        self.weight = affine_parameter(shape, elementwise_affine, device, dtype)
        self.bias = affine_parameter(shape, elementwise_affine and bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_affine(self.weight, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        if not self.channels_first:
            return self._normalize(x)
        if x.dim() < 2 or x.shape[1] != self.normalized_shape[0]:
            raise ValueError(f"expected (B, {self.normalized_shape[0]}, *), got {tuple(x.shape)}")
        return self._normalize(x.movedim(1, -1)).movedim(-1, 1)

    def _normalize(self, x: Tensor) -> Tensor:
        """The norm over the trailing ``normalized_shape`` dims of ``x``."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        layout = ", channels_first=True" if self.channels_first else ""
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"weight={self.weight is not None}, bias={self.bias is not None}{layout}"
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
        channels_first: normalise dim 1 of ``(B, C, *)`` instead (an int ``num_features``).
        device, dtype: of the parameters, as torch's factory kwargs.

    Shape:
        - x: ``(*, *num_features)``, or ``(B, C, *)`` with ``channels_first``; output: same.
    """

    eps: float  # never None here (RMSNorm's may be)

    def __init__(
        self,
        num_features: int | Sequence[int],
        *,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        channels_first: bool = False,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        _args.eps(eps)
        super().__init__(num_features, eps, elementwise_affine, bias, channels_first, device, dtype)

    def _normalize(self, x: Tensor) -> Tensor:
        return fl.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


@register("rms")
class RMSNorm(_TrailingNorm):
    """Root-mean-square normalization over the trailing ``num_features`` dims.

    .. math:: y = \\frac{x}{\\sqrt{\\mathrm{E}[x^2] + \\epsilon}} \\odot w

    Args:
        num_features: the normalised trailing shape.
        eps: added to the mean of squares; ``None`` means what it means in
            ``torch.nn.RMSNorm``: ``torch.finfo`` eps of the computation dtype (float32 for
            half / bfloat16 / float32 inputs, float64 for float64).
        elementwise_affine: learn ``w`` (ones).
        channels_first, device, dtype: as in :class:`LayerNorm`.

    Shape:
        - x: ``(*, *num_features)``, or ``(B, C, *)`` with ``channels_first``; output: same.
    """

    def __init__(
        self,
        num_features: int | Sequence[int],
        *,
        eps: float | None = 1e-6,
        elementwise_affine: bool = True,
        channels_first: bool = False,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        _args.eps(eps, allow_none=True)
        super().__init__(
            num_features, eps, elementwise_affine, False, channels_first, device, dtype
        )

    def _normalize(self, x: Tensor) -> Tensor:
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
        elementwise_affine, bias, channels_first, device, dtype: as in :class:`LayerNorm`.

    Shape:
        - x: ``(*, *num_features)``, or ``(B, C, *)`` with ``channels_first``; output: same.
    """

    eps: float  # never None here (RMSNorm's may be)

    def __init__(
        self,
        num_features: int | Sequence[int],
        *,
        p: float = 2.0,
        eps: float = 1e-6,
        elementwise_affine: bool = True,
        bias: bool = True,
        channels_first: bool = False,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        _args.real("p", p, low=0.0, open_low=True)
        _args.eps(eps)
        super().__init__(num_features, eps, elementwise_affine, bias, channels_first, device, dtype)
        self.p = p

    def _normalize(self, x: Tensor) -> Tensor:
        return fl.lp_norm(x, self.p, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, p={self.p}"


@register("group")
class GroupNorm(nn.Module):
    """Group normalization: per-sample statistics over each group of channels.

    .. math:: y = \\frac{x - \\mathrm{E}_g[x]}{\\sqrt{\\mathrm{Var}_g[x] + \\epsilon}}
              \\odot w_c + b_c

    ``GroupNorm(C, num_groups=C)`` is :class:`InstanceNorm` (affine);
    ``GroupNorm(C, num_groups=1)`` is layer norm over ``(C, *spatial)``. Unlike
    ``torch.nn.GroupNorm(num_groups, num_channels)`` the channel count comes first (the
    contract of every norm here, and the call timm and torchvision make:
    ``partial(GroupNorm, num_groups=32)(C, device=..., dtype=...)``).

    Args:
        num_features: channels ``C``.
        num_groups: divides ``C`` (default 32, as in Wu & He).
        eps: added to the biased variance.
        affine: learn per-channel ``w`` (ones) and ``b`` (zeros).
        device, dtype: of the parameters, as torch's factory kwargs.

    Shape:
        - x: ``(B, C, *)``; output: same.
    """

    def __init__(
        self,
        num_features: int,
        *,
        num_groups: int = 32,
        eps: float = 1e-5,
        affine: bool = True,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_features = _args.positive_int("num_features", num_features)
        self.num_groups = _args.positive_int("num_groups", num_groups)
        if num_features % num_groups:
            raise ValueError(
                f"num_groups must divide num_features={num_features}, got {num_groups}"
            )
        self.eps, self.affine = _args.eps(eps), affine
        self.weight = affine_parameter(num_features, affine, device, dtype)
        self.bias = affine_parameter(num_features, affine, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_affine(self.weight, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 2 or x.shape[1] != self.num_features:
            raise ValueError(f"expected (B, {self.num_features}, *), got {tuple(x.shape)}")
        return fl.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, num_groups={self.num_groups}, eps={self.eps}, affine={self.affine}"


@register("instance")
class InstanceNorm(RunningStatsNorm):
    """Instance normalization, for any number of spatial dims, with optional running stats.

    .. math:: y = \\frac{x - \\mathrm{E}_{s}[x]}{\\sqrt{\\mathrm{Var}_{s}[x] + \\epsilon}}
              \\odot w_c + b_c

    With ``track_running_stats`` the module keeps ``running_mean`` / ``running_var``
    (batch-averaged per-instance mean and unbiased variance, exponential average with
    ``momentum``) and ``num_batches_tracked``, the buffers of
    ``torch.nn.InstanceNorm2d(track_running_stats=True)`` (state dicts load both ways),
    and in eval mode normalises with them instead of the input's statistics.
    ``momentum=None`` is the cumulative average ``1 / num_batches_tracked``, as for
    :class:`BatchNorm`; torch's instance norm accepts ``None`` too but then never
    updates its running statistics (it passes momentum 0), nor does it advance
    ``num_batches_tracked``, which here counts the training batches.

    Args:
        num_features: channels ``C``.
        eps: added to the variance (positive).
        momentum: running-average factor in ``[0, 1]``, or ``None``.
        affine: learn per-channel ``w`` and ``b`` (off by default, as in torch).
        track_running_stats: keep running statistics and use them in eval mode.
        device, dtype: of the parameters and buffers, as torch's factory kwargs.

    Shape:
        - x: ``(B, C, *spatial)``; output: same.
    """

    def __init__(
        self,
        num_features: int,
        *,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x, min_dim=3)
        use_input_stats, momentum = self._step()
        return fl.instance_norm(
            x,
            self.weight,
            self.bias,
            self.eps,
            running_mean=self.running_mean,
            running_var=self.running_var,
            use_input_stats=use_input_stats,
            momentum=momentum,
        )

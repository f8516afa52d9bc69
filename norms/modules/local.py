"""Local normalization modules: LocalResponseNorm, LocalContrastNorm, GlobalResponseNorm."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from norms.functional import _args
from norms.functional import local as fl
from norms.modules._affine import Device, empty_parameter
from norms.registry import register

__all__ = ["GlobalResponseNorm", "LocalContrastNorm", "LocalResponseNorm"]


def _check_input(x: Tensor, num_features: int | None) -> None:
    if x.dim() < 2 or (num_features is not None and x.shape[1] != num_features):
        channels = "C" if num_features is None else num_features
        raise ValueError(f"expected (B, {channels}, *), got {tuple(x.shape)}")


@register("local_response")
class LocalResponseNorm(nn.Module):
    """Cross-channel local response normalization, AlexNet form (alpha scales the sum).

    .. math:: b_i = a_i \\Big/ \\Big(k + \\alpha \\sum_{|j - i| \\le \\lfloor n/2 \\rfloor} a_j^2\\Big)^{\\beta}

    Unlike ``torch.nn.LocalResponseNorm``, ``alpha`` is not divided by ``size``: for odd
    ``size`` this module equals ``torch.nn.LocalResponseNorm(size, alpha * size, beta, k)``
    (for even ``size`` the window here has ``size + 1`` channels, the paper's limits).
    The default ``k`` is AlexNet's 2 (torch's is 1). See
    :func:`norms.functional.local_response_norm`.

    Args:
        num_features: channels ``C``, checked on input; ``None`` (the default) accepts
            any channel count, as torch's parameter-free layer does, so
            ``LocalResponseNorm(size=n, alpha=a * n, beta=b, k=k)`` replaces
            ``torch.nn.LocalResponseNorm(n, a, b, k)`` (odd ``n``).
        size: window ``n``; alpha, beta, k: as in the formula.
        device, dtype: accepted for the common factory signature; the layer holds no
            tensors.

    Shape:
        - x: ``(B, C, *)``; output: same.
    """

    def __init__(
        self,
        num_features: int | None = None,
        *,
        size: int = 5,
        alpha: float = 1e-4,
        beta: float = 0.75,
        k: float = 2.0,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if num_features is not None:
            _args.positive_int("num_features", num_features)
        fl._check_lrn_args(size, alpha, beta, k)
        self.num_features, self.size = num_features, size
        self.alpha, self.beta, self.k = alpha, beta, k

    def reset_parameters(self) -> None:
        """Nothing to reset: the layer has no parameters."""

    def forward(self, x: Tensor) -> Tensor:
        _check_input(x, self.num_features)
        return fl.local_response_norm(x, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        channels = "" if self.num_features is None else f"{self.num_features}, "
        return f"{channels}size={self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


@register("local_contrast")
class LocalContrastNorm(LocalResponseNorm):
    """Local contrast normalization: subtract the local spatial mean, then divisive LRN.

    See :func:`norms.functional.local_contrast_norm`.

    Args:
        num_features: channels ``C`` (``None``: any).
        size: cross-channel window of the divisive step.
        kernel_size: odd side of the spatial mean window.
        alpha, beta, k: as in :class:`LocalResponseNorm`.
        device, dtype: accepted for the common factory signature (no tensors held).

    Shape:
        - x: ``(B, C, H, W)``; output: same.
    """

    def __init__(
        self,
        num_features: int | None = None,
        *,
        size: int = 5,
        kernel_size: int = 9,
        alpha: float = 1e-4,
        beta: float = 0.75,
        k: float = 2.0,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(num_features, size=size, alpha=alpha, beta=beta, k=k)
        fl._check_kernel_size(kernel_size)
        self.kernel_size = kernel_size

    def forward(self, x: Tensor) -> Tensor:
        _check_input(x, self.num_features)
        return fl.local_contrast_norm(x, self.size, self.kernel_size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel_size={self.kernel_size}"


@register("global_response")
class GlobalResponseNorm(nn.Module):
    """Global response normalization (ConvNeXt V2) with zero-initialised weight and bias.

    .. math:: y = x \\odot (1 + w \\odot N(x)) + b, \\qquad
              N(x)_{bc} = \\frac{\\lVert x_{bc} \\rVert_2}{\\mathrm{mean}_{c'} \\lVert x_{bc'} \\rVert_2 + \\epsilon}

    It starts as the identity (``w = b = 0``), as in the paper. Parameter names match
    timm's ``GlobalResponseNorm``, so its state dicts load both ways; note timm's
    default layout is channels-last, the default here is channels at dim 1.

    Args:
        num_features: channels ``C``.
        eps: guards the division.
        channels_last: inputs are ``(B, *spatial, C)`` (ConvNeXt-V2's MLP on tokens)
            instead of ``(B, C, *spatial)``.
        device, dtype: of the parameters, as torch's factory kwargs.

    Shape:
        - x: ``(B, C, *spatial)``, or ``(B, *spatial, C)`` with ``channels_last``;
          output: same.
    """

    def __init__(
        self,
        num_features: int,
        *,
        eps: float = 1e-6,
        channels_last: bool = False,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_features = _args.positive_int("num_features", num_features)
        self.eps, self.channels_last = _args.eps(eps), channels_last
        self.weight = empty_parameter(num_features, device, dtype)
        self.bias = empty_parameter(num_features, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        channel_dim = -1 if self.channels_last else 1
        if x.dim() < 3 or x.shape[channel_dim] != self.num_features:
            layout = "*spatial, {}" if self.channels_last else "{}, *spatial"
            expected = f"(B, {layout.format(self.num_features)})"
            raise ValueError(f"expected {expected}, got {tuple(x.shape)}")
        return fl.global_response_norm(
            x, self.weight, self.bias, self.eps, channels_last=self.channels_last
        )

    def extra_repr(self) -> str:
        layout = ", channels_last=True" if self.channels_last else ""
        return f"{self.num_features}, eps={self.eps}{layout}"

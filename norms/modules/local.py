"""Local normalization modules: LocalResponseNorm, LocalContrastNorm, GlobalResponseNorm."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from norms.functional import local as fl
from norms.registry import register

__all__ = ["GlobalResponseNorm", "LocalContrastNorm", "LocalResponseNorm"]


def _check_num_features(num_features: int) -> None:
    if not (isinstance(num_features, int) and num_features > 0):
        raise ValueError(f"num_features must be a positive int, got {num_features}")


def _check_input(x: Tensor, num_features: int) -> None:
    if x.dim() < 2 or x.shape[1] != num_features:
        raise ValueError(f"expected (B, {num_features}, *), got {tuple(x.shape)}")


@register("local_response")
class LocalResponseNorm(nn.Module):
    """Cross-channel local response normalization, AlexNet form (alpha scales the sum).

    .. math:: b_i = a_i \\Big/ \\Big(k + \\alpha \\sum_{|j - i| \\le \\lfloor n/2 \\rfloor} a_j^2\\Big)^{\\beta}

    Unlike ``torch.nn.LocalResponseNorm``, ``alpha`` is not divided by ``size``: for odd
    ``size`` this module equals ``torch.nn.LocalResponseNorm(size, alpha * size, beta, k)``.
    See :func:`norms.functional.local_response_norm`.

    Args:
        num_features: channels ``C`` (checked on input; the layer has no parameters).
        size: window ``n``; alpha, beta, k: as in the formula.

    Shape:
        - x: ``(B, C, *)``; output: same.
    """

    def __init__(
        self,
        num_features: int,
        *,
        size: int = 5,
        alpha: float = 1e-4,
        beta: float = 0.75,
        k: float = 2.0,
    ) -> None:
        super().__init__()
        _check_num_features(num_features)
        fl._check_lrn_args(size, alpha, beta, k)
        self.num_features, self.size, self.alpha, self.beta, self.k = (
            num_features,
            size,
            alpha,
            beta,
            k,
        )

    def reset_parameters(self) -> None:
        """Nothing to reset: the layer has no parameters."""

    def forward(self, x: Tensor) -> Tensor:
        _check_input(x, self.num_features)
        return fl.local_response_norm(x, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, size={self.size}, alpha={self.alpha}, "
            f"beta={self.beta}, k={self.k}"
        )


@register("local_contrast")
class LocalContrastNorm(LocalResponseNorm):
    """Local contrast normalization: subtract the local spatial mean, then divisive LRN.

    See :func:`norms.functional.local_contrast_norm`.

    Args:
        num_features: channels ``C``.
        size: cross-channel window of the divisive step.
        kernel_size: odd side of the spatial mean window.
        alpha, beta, k: as in :class:`LocalResponseNorm`.

    Shape:
        - x: ``(B, C, H, W)``; output: same.
    """

    def __init__(
        self,
        num_features: int,
        *,
        size: int = 5,
        kernel_size: int = 9,
        alpha: float = 1e-4,
        beta: float = 0.75,
        k: float = 2.0,
    ) -> None:
        super().__init__(num_features, size=size, alpha=alpha, beta=beta, k=k)
        if not (isinstance(kernel_size, int) and kernel_size > 0 and kernel_size % 2 == 1):
            raise ValueError(f"kernel_size must be a positive odd int, got {kernel_size}")
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

    It starts as the identity (``w = b = 0``), as in the paper.

    Args:
        num_features: channels ``C``.
        eps: guards the division.

    Shape:
        - x: ``(B, C, *spatial)``; output: same.
    """

    def __init__(self, num_features: int, *, eps: float = 1e-6) -> None:
        super().__init__()
        _check_num_features(num_features)
        if not eps >= 0:
            raise ValueError(f"eps must be non-negative, got {eps}")
        self.num_features, self.eps = num_features, eps
        self.weight = nn.Parameter(torch.empty(num_features))
        self.bias = nn.Parameter(torch.empty(num_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        _check_input(x, self.num_features)
        return fl.global_response_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"

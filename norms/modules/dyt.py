"""DynamicTanh: the normalization-free drop-in for LayerNorm."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from norms.functional.dyt import dynamic_tanh
from norms.registry import register

__all__ = ["DynamicTanh"]


@register("dyt")
class DynamicTanh(nn.Module):
    """Dynamic tanh: ``y = w * tanh(alpha * x) + b`` with a learned scalar ``alpha``.

    .. math:: y = w \\odot \\tanh(\\alpha x) + b

    Args:
        num_features: size of the feature dim carrying ``w`` and ``b``.
        alpha_init: initial ``alpha`` (0.5 in the paper for most transformers).
        channels_first: features at dim 1 (images ``(B, C, *)``) instead of the last dim
            (tokens ``(B, T, D)``).
        elementwise_affine: learn ``w`` (ones) and ``b`` (zeros).

    Shape:
        - x: ``(*, D)``, or ``(B, C, *)`` with ``channels_first``; output: same.
    """

    def __init__(
        self,
        num_features: int,
        *,
        alpha_init: float = 0.5,
        channels_first: bool = False,
        elementwise_affine: bool = True,
    ) -> None:
        super().__init__()
        if not (isinstance(num_features, int) and num_features > 0):
            raise ValueError(f"num_features must be a positive int, got {num_features}")
        if not alpha_init > 0:
            raise ValueError(f"alpha_init must be positive, got {alpha_init}")
        self.num_features, self.alpha_init = num_features, alpha_init
        self.channels_first, self.elementwise_affine = channels_first, elementwise_affine
        self.alpha = nn.Parameter(torch.empty(1))
        self.weight = nn.Parameter(torch.empty(num_features)) if elementwise_affine else None
        self.bias = nn.Parameter(torch.empty(num_features)) if elementwise_affine else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.alpha_init)
        if self.elementwise_affine:
            nn.init.ones_(self.weight)
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        dim = 1 if self.channels_first else -1
        if x.dim() < 2 or x.shape[dim] != self.num_features:
            raise ValueError(
                f"expected {self.num_features} features at dim {dim}, got {tuple(x.shape)}"
            )
        weight, bias = self.weight, self.bias
        if self.channels_first and weight is not None:
            view = (self.num_features,) + (1,) * (x.dim() - 2)
            weight, bias = weight.view(view), bias.view(view)
        return dynamic_tanh(x, self.alpha, weight, bias)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, alpha_init={self.alpha_init}, "
            f"channels_first={self.channels_first}, elementwise_affine={self.elementwise_affine}"
        )

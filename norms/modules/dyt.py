"""DynamicTanh: the normalization-free drop-in for LayerNorm."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from norms.functional import _args
from norms.functional.dyt import dynamic_tanh
from norms.modules._affine import affine_parameter, reset_affine
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
        device, dtype: of the parameters, as torch's factory kwargs.

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
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_features = _args.positive_int("num_features", num_features)
        self.alpha_init = _args.real("alpha_init", alpha_init, low=0.0, open_low=True)
        self.channels_first, self.elementwise_affine = channels_first, elementwise_affine
        self.alpha = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.weight = affine_parameter(num_features, elementwise_affine, device, dtype)
        self.bias = affine_parameter(num_features, elementwise_affine, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.alpha_init)
        reset_affine(self.weight, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        dim = 1 if self.channels_first else -1
        if x.dim() < 2 or x.shape[dim] != self.num_features:
            raise ValueError(
                f"expected {self.num_features} features at dim {dim}, got {tuple(x.shape)}"
            )
        weight: Tensor | None = self.weight
        bias: Tensor | None = self.bias
        if self.channels_first and weight is not None and bias is not None:  # both or neither
            view = (self.num_features,) + (1,) * (x.dim() - 2)
            weight, bias = weight.view(view), bias.view(view)
        return dynamic_tanh(x, self.alpha, weight, bias)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, alpha_init={self.alpha_init}, "
            f"channels_first={self.channels_first}, elementwise_affine={self.elementwise_affine}"
        )

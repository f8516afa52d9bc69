"""The whitening-and-colouring module (WCT): the decorrelated member of the family."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from norms.functional import _args
from norms.functional import whitening as fw
from norms.registry import register

__all__ = ["WhiteningColoring"]


@register("whitening_coloring")
class WhiteningColoring(nn.Module):
    """Whiten the content's channels jointly and colour them with the style's covariance.

    .. math:: \\mathrm{WCT}(c, s) = S_s^{1/2} S_c^{-1/2} (c - \\mu_c) + \\mu_s

    blended with the content by ``alpha``. Parameter-free; see
    :func:`norms.functional.whitening_coloring`. With diagonal covariances it is
    :class:`~norms.AdaIN`.

    Args:
        num_features: channels ``C``.
        alpha: the blend with the content, in ``[0, 1]``.
        floor: eigenvalues at or below it are dropped (dead directions).
        max_positions: read larger maps on a grid; ``None``: every position.
        device, dtype: accepted for the common factory signature (no tensors held).

    Shape:
        - content: ``(B, C, H, W)``; style: ``(B or 1, C, h, w)``; output: like content.
    """

    def __init__(
        self,
        num_features: int,
        *,
        alpha: float = 1.0,
        floor: float = fw.EIGEN_FLOOR,
        max_positions: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_features = _args.positive_int("num_features", num_features)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if floor < 0:
            raise ValueError(f"floor must be >= 0, got {floor}")
        if max_positions is not None:
            _args.positive_int("max_positions", max_positions)
        self.alpha, self.floor, self.max_positions = alpha, floor, max_positions

    def reset_parameters(self) -> None:
        """Nothing to reset: WCT has no parameters."""

    def forward(self, content: Tensor, style: Tensor) -> Tensor:
        if content.dim() < 2 or content.shape[1] != self.num_features:
            raise ValueError(
                f"expected {self.num_features} channels at dim 1, got {tuple(content.shape)}"
            )
        return fw.whitening_coloring(content, style, self.alpha, self.floor, self.max_positions)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, alpha={self.alpha}, floor={self.floor}, "
            f"max_positions={self.max_positions}"
        )

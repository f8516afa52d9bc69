"""SwitchableNorm: learned softmax weights over IN, LN and BN statistics."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from norms.functional.switchable import switchable_norm
from norms.modules.batch import RunningStatsNorm
from norms.registry import register

__all__ = ["SwitchableNorm"]


@register("switchable")
class SwitchableNorm(RunningStatsNorm):
    """Switchable normalization (Luo et al., 2019).

    .. math::
        y = \\gamma\\frac{x - \\sum_k w^{\\mu}_k \\mu_k}
                         {\\sqrt{\\sum_k w^{\\sigma}_k \\sigma^2_k + \\epsilon}} + \\beta,
        \\qquad w^{\\mu} = \\mathrm{softmax}(\\lambda^{\\mu}),\\;
        w^{\\sigma} = \\mathrm{softmax}(\\lambda^{\\sigma})

    over the instance, layer and batch moments ``k in (IN, LN, BN)``. The logits
    ``mean_logits``/``var_logits`` start at zero (equal weights). The BN branch keeps
    running statistics: in eval it uses them while IN and LN use the current input; with
    ``track_running_stats=False`` it uses batch moments in both modes. See
    :func:`norms.functional.switchable_norm`.

    Args:
        num_features: channels ``C``.
        eps, momentum, affine, track_running_stats, device, dtype: see
            :class:`norms.modules.batch.RunningStatsNorm`.

    Shape:
        - input: ``(B, C, *spatial)`` with at least one spatial dim; output: same.
    """

    def __init__(
        self,
        num_features: int,
        *,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.mean_logits = nn.Parameter(torch.zeros(3, device=device, dtype=dtype))
        self.var_logits = nn.Parameter(torch.zeros(3, device=device, dtype=dtype))

    def reset_parameters(self) -> None:
        """Equal branch weights (zero logits), ones/zeros affine, fresh running stats."""
        super().reset_parameters()
        # The base __init__ calls this before the logits exist; they are created zero.
        for name in ("mean_logits", "var_logits"):
            logits = getattr(self, name, None)
            if logits is not None:
                nn.init.zeros_(logits)

    def branch_weights(self) -> tuple[Tensor, Tensor]:
        """The current ``(mean_weight, var_weight)``, each ``(3,)`` over (IN, LN, BN)."""
        return self.mean_logits.softmax(0), self.var_logits.softmax(0)

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x, min_dim=3)
        mean_weight, var_weight = self.branch_weights()
        batch_stats, momentum = self._step()
        return switchable_norm(
            x,
            mean_weight,
            var_weight,
            self.weight,
            self.bias,
            self.eps,
            self.running_mean,
            self.running_var,
            batch_stats,
            momentum,
        )

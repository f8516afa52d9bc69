"""Conditioned normalization modules: AdaIN, conditional IN, adaLN and adaLN-Zero."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from norms.functional import _args
from norms.functional import adaptive as fa
from norms.modules._affine import Device, empty_parameter, reset_affine
from norms.registry import register

__all__ = ["AdaIN", "AdaLN", "AdaLNZero", "ConditionalInstanceNorm", "Modulation"]


def _check_channels(x: Tensor, num_features: int, dim: int) -> None:
    if x.dim() <= dim or x.shape[dim] != num_features:
        raise ValueError(
            f"expected {num_features} features at dim {dim}, got input of shape {tuple(x.shape)}"
        )


@register("adain")
class AdaIN(nn.Module):
    """Adaptive instance normalization: impose the style's channel statistics on the content.

    .. math:: \\mathrm{AdaIN}(c, s) = \\sigma_s \\frac{c - \\mu_c}{\\sigma_c} + \\mu_s

    Parameter-free; see :func:`norms.functional.adain`.

    Args:
        num_features: channels ``C``.
        eps: added to both variances.
        device, dtype: accepted for the common factory signature (no tensors held).

    Shape:
        - content: ``(B, C, *spatial)``; style: ``(B or 1, C, *spatial')``
        - output: same as content.
    """

    def __init__(
        self,
        num_features: int,
        *,
        eps: float = 1e-5,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_features = _args.positive_int("num_features", num_features)
        self.eps = _args.eps(eps, positive=True)

    def reset_parameters(self) -> None:
        """Nothing to reset: AdaIN has no parameters."""

    def forward(self, content: Tensor, style: Tensor) -> Tensor:
        _check_channels(content, self.num_features, 1)
        return fa.adain(content, style, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"


@register("conditional_instance")
class ConditionalInstanceNorm(nn.Module):
    """Instance norm with a table of per-style affine parameters (Dumoulin et al., 2017).

    .. math:: y = \\Big(\\sum_s w_s \\Gamma_s\\Big) \\hat x + \\sum_s w_s B_s

    where ``w`` is one-hot (integer style index) or any mixing weights (convex weights
    interpolate between styles).

    Args:
        num_features: channels ``C``.
        num_styles: rows ``S`` of the ``weight`` / ``bias`` tables, each ``(S, C)``.
        eps: added to the variance.
        device, dtype: of the tables, as torch's factory kwargs.

    Shape:
        - x: ``(B, C, *spatial)``; style: ``(B,)`` integer or ``(B, S)`` floating
        - output: same as x.
    """

    def __init__(
        self,
        num_features: int,
        *,
        num_styles: int,
        eps: float = 1e-5,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_features = _args.positive_int("num_features", num_features)
        self.num_styles = _args.positive_int("num_styles", num_styles)
        self.eps = _args.eps(eps, positive=True)
        self.weight = empty_parameter((num_styles, num_features), device, dtype)
        self.bias = empty_parameter((num_styles, num_features), device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_affine(self.weight, self.bias)

    def forward(self, x: Tensor, style: Tensor) -> Tensor:
        _check_channels(x, self.num_features, 1)
        return fa.conditional_instance_norm(x, style, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, num_styles={self.num_styles}, eps={self.eps}"


class Modulation(NamedTuple):
    """One branch's adaLN-Zero modulation, each field ``(B, D)``."""

    shift: Tensor
    scale: Tensor
    gate: Tensor


class _ConditionProjection(nn.Module):
    """Shared body of adaLN / adaLN-Zero: ``SiLU -> Linear`` with a zero-initialised Linear."""

    def __init__(
        self,
        num_features: int,
        cond_features: int,
        chunks: int,
        eps: float,
        device: Device,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        self.num_features = _args.positive_int("num_features", num_features)
        self.cond_features = _args.positive_int("cond_features", cond_features)
        self.eps = _args.eps(eps, positive=True)
        self.proj = nn.Sequential(
            nn.SiLU(),
            nn.Linear(cond_features, chunks * num_features, device=device, dtype=dtype),
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Zero the projection, so every shift / scale / gate starts at 0."""
        nn.init.zeros_(self._linear().weight)
        nn.init.zeros_(self._linear().bias)

    def _linear(self) -> nn.Linear:
        """The projection's ``Linear`` (``proj[1]``)."""
        linear = self.proj[1]
        assert isinstance(linear, nn.Linear)
        return linear

    def _chunks(self, c: Tensor) -> tuple[Tensor, ...]:
        if c.dim() != 2 or c.shape[1] != self.cond_features:
            raise ValueError(f"condition must be (B, {self.cond_features}), got {tuple(c.shape)}")
        chunks: tuple[Tensor, ...] = self.proj(c).chunk(
            self._linear().out_features // self.num_features, dim=1
        )
        return chunks

    def extra_repr(self) -> str:
        return f"{self.num_features}, cond_features={self.cond_features}, eps={self.eps}"


@register("adaln")
class AdaLN(_ConditionProjection):
    """Adaptive layer norm: LayerNorm without affine, shifted and scaled by the condition.

    .. math:: (\\text{shift}, \\text{scale}) = \\mathrm{Linear}(\\mathrm{SiLU}(c)), \\qquad
              y = \\mathrm{LN}(x) \\odot (1 + \\text{scale}) + \\text{shift}

    The projection is zero-initialised, so the module starts as a plain LayerNorm
    without affine (DiT's final layer).

    Args:
        num_features: token width ``D``.
        cond_features: conditioning width.
        eps: layer-norm epsilon.
        device, dtype: of the projection, as torch's factory kwargs.

    Shape:
        - x: ``(B, T, D)``; c: ``(B, cond_features)``
        - output: ``(B, T, D)``.
    """

    def __init__(
        self,
        num_features: int,
        cond_features: int,
        *,
        eps: float = 1e-6,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(num_features, cond_features, 2, eps, device, dtype)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        _check_channels(x, self.num_features, 2)
        shift, scale = self._chunks(c)
        return fa.ada_layer_norm(x, shift, scale, self.eps)


@register("adaln_zero")
class AdaLNZero(_ConditionProjection):
    """adaLN-Zero (Peebles & Xie, 2023): condition -> shift, scale, gate per residual branch.

    .. math:: (\\text{shift}_k, \\text{scale}_k, \\text{gate}_k)_{k<K}
              = \\mathrm{Linear}(\\mathrm{SiLU}(c)), \\qquad
              x \\leftarrow x + \\text{gate}_k \\odot f_k(\\mathrm{LN}(x) \\odot
              (1 + \\text{scale}_k) + \\text{shift}_k)

    With the zero-initialised projection every gate is 0, so a block built this way is
    the identity at initialisation. Usage in a block::

        attn_mod, mlp_mod = adaln(c)
        x = x + attn_mod.gate[:, None] * attn(adaln.normalize(x, attn_mod))
        x = x + mlp_mod.gate[:, None] * mlp(adaln.normalize(x, mlp_mod))

    Args:
        num_features: token width ``D``.
        cond_features: conditioning width.
        num_branches: residual branches ``K`` modulated (2 for attention + MLP).
        eps: layer-norm epsilon used by :meth:`normalize`.
        device, dtype: of the projection, as torch's factory kwargs.

    Shape:
        - c: ``(B, cond_features)`` -> ``K`` :class:`Modulation` of ``(B, D)`` tensors
        - normalize: x ``(B, T, D)`` -> ``(B, T, D)``.
    """

    def __init__(
        self,
        num_features: int,
        cond_features: int,
        *,
        num_branches: int = 2,
        eps: float = 1e-6,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        _args.positive_int("num_branches", num_branches)
        super().__init__(num_features, cond_features, 3 * num_branches, eps, device, dtype)
        self.num_branches = num_branches

    def forward(self, c: Tensor) -> tuple[Modulation, ...]:
        chunks = self._chunks(c)
        return tuple(Modulation(*chunks[3 * k : 3 * k + 3]) for k in range(self.num_branches))

    def normalize(self, x: Tensor, mod: Modulation) -> Tensor:
        """``LN(x) * (1 + mod.scale) + mod.shift`` over the last dim of ``x (B, T, D)``."""
        _check_channels(x, self.num_features, 2)
        return fa.ada_layer_norm(x, mod.shift, mod.scale, self.eps)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_branches={self.num_branches}"

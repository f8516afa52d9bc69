"""Adaptive (conditioned) normalization: AdaIN, conditional IN, adaLN ``modulate``.

AdaIN and conditional IN are an instance norm followed by a per-(sample, channel)
affine. For contiguous float32 / float64 inputs that whole map is one call of torch's
native group-norm kernel on the ``(1, B*C, *spatial)`` view, with ``B*C`` groups and the
per-(sample, channel) scale and shift as its weight and bias: one read and one write of
the tensor, statistics by the kernel's Welford reduction. Otherwise (half / bfloat16,
other layouts) the moments come from :func:`norms.functional._stats.moments` in float32
and are applied by :func:`norms.functional.layer.center_scale_shift`. adaLN is the native
layer norm plus one fused ``addcmul``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

from norms.functional._stats import moments
from norms.functional.layer import center_scale_shift, layer_norm

_NATIVE_DTYPES = (torch.float32, torch.float64)

__all__ = [
    "ada_layer_norm",
    "adain",
    "adain_with_stats",
    "channel_mean_std",
    "conditional_instance_norm",
    "modulate",
]


def _check_image(x: Tensor, name: str) -> None:
    if x.dim() < 3:
        raise ValueError(
            f"{name} must be (B, C, *spatial) with at least one spatial dim, got {tuple(x.shape)}"
        )


def _instance_norm_affine(x: Tensor, scale: Tensor, shift: Tensor, eps: float) -> Tensor:
    """``scale * (x - mu) / sqrt(var + eps) + shift`` per (sample, channel) over space.

    Shape:
        - x: ``(B, C, *spatial)``; scale, shift: ``(B, C)`` in any floating dtype.
    """
    batch, channels = x.shape[:2]
    if x.dtype in _NATIVE_DTYPES and x.is_contiguous():
        rows = batch * channels
        flat = x.reshape(1, rows, -1)  # (1, B*C, S): one group per (sample, channel)
        weight, bias = scale.reshape(rows).to(x.dtype), shift.reshape(rows).to(x.dtype)
        return F.group_norm(flat, rows, weight, bias, eps).view(x.shape)
    mean, var = moments(x, range(2, x.dim()))  # (B, C, 1, ...)
    view = (batch, channels) + (1,) * (x.dim() - 2)
    factor = scale.to(mean.dtype).reshape(view) * torch.rsqrt(var + eps)
    return center_scale_shift(x, mean, factor, shift.to(mean.dtype).reshape(view))


def channel_mean_std(x: Tensor, eps: float = 1e-5) -> tuple[Tensor, Tensor]:
    """Per-(sample, channel) mean and ``sqrt(var + eps)`` over the spatial dims.

    .. math:: \\mu_{bc} = \\frac{1}{n}\\sum_s x_{bcs}, \\qquad
              \\sigma_{bc} = \\sqrt{\\frac{1}{n}\\sum_s (x_{bcs} - \\mu_{bc})^2 + \\epsilon}

    Args:
        x: image-like tensor with channels at dim 1.
        eps: added to the biased variance before the square root.

    Shape:
        - x: ``(B, C, *spatial)``
        - returns: two tensors ``(B, C, 1, ..., 1)`` in the accumulation dtype
          (float32 for half/bf16/float32, float64 for float64), ready to broadcast.
    """
    _check_image(x, "x")
    mean, var = moments(x, range(2, x.dim()))
    return mean, torch.sqrt(var + eps)


def adain(content: Tensor, style: Tensor, eps: float = 1e-5) -> Tensor:
    """Adaptive instance normalization (Huang & Belongie, 2017).

    .. math:: \\mathrm{AdaIN}(c, s) = \\sigma_s \\frac{c - \\mu_c}{\\sigma_c} + \\mu_s,
              \\qquad \\sigma = \\sqrt{\\mathrm{Var} + \\epsilon}

    with means and (biased) variances per sample and channel over the spatial dims.
    The style is reduced once (:func:`channel_mean_std`); the content is normalised and
    given ``(sigma_s, mu_s)`` as a per-(sample, channel) affine in one pass (see the
    module docstring).

    Args:
        content: the features to restyle.
        style: the features whose channel statistics are imposed; batch 1 broadcasts to
            every content sample, otherwise the batch must match. Spatial sizes may differ.
        eps: added to both variances.

    Shape:
        - content: ``(B, C, *spatial)``
        - style: ``(B, C, *spatial')`` or ``(1, C, *spatial')``
        - output: same as ``content`` (and its dtype).
    """
    _check_image(content, "content")
    _check_image(style, "style")
    if style.shape[1] != content.shape[1]:
        raise ValueError(
            f"channel mismatch: content has {content.shape[1]}, style {style.shape[1]}"
        )
    if style.shape[0] not in (1, content.shape[0]):
        raise ValueError(f"style batch must be 1 or {content.shape[0]}, got {style.shape[0]}")
    if style.dim() != content.dim():
        raise ValueError(f"content and style ranks differ: {content.dim()} vs {style.dim()}")
    mean_s, std_s = channel_mean_std(style, eps)
    return adain_with_stats(content, mean_s.flatten(1), std_s.flatten(1), eps)


def adain_with_stats(content: Tensor, mean: Tensor, std: Tensor, eps: float = 1e-5) -> Tensor:
    """AdaIN towards given target statistics (cached or interpolated style statistics).

    .. math:: y = \\sigma_t \\frac{c - \\mu_c}{\\sqrt{\\mathrm{Var}[c] + \\epsilon}} + \\mu_t

    per sample and channel over the spatial dims; ``adain(c, s)`` is this with
    ``(mu_t, sigma_t) = channel_mean_std(s, eps)``.

    Args:
        content: the features to restyle.
        mean, std: the target ``mu_t`` and ``sigma_t`` per (sample, channel); batch 1
            broadcasts to every content sample.
        eps: added to the content's variance.

    Shape:
        - content: ``(B, C, *spatial)``
        - mean, std: ``(B, C)`` or ``(1, C)``
        - output: same as ``content`` (and its dtype).
    """
    _check_image(content, "content")
    batch, channels = content.shape[:2]
    for name, t in (("mean", mean), ("std", std)):
        if t.dim() != 2 or t.shape[1] != channels or t.shape[0] not in (1, batch):
            raise ValueError(f"{name} must be (1 or {batch}, {channels}), got {tuple(t.shape)}")
    size = content.shape[:2]
    return _instance_norm_affine(content, std.expand(size), mean.expand(size), eps)


def conditional_instance_norm(
    x: Tensor, style: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5
) -> Tensor:
    """Conditional instance normalization (Dumoulin et al., 2017) with convex style mixing.

    .. math:: y = \\gamma_b \\frac{x - \\mu}{\\sqrt{\\sigma^2 + \\epsilon}} + \\beta_b,
              \\qquad \\gamma_b = \\sum_s w_{bs} \\Gamma_s, \\quad \\beta_b = \\sum_s w_{bs} B_s

    Args:
        x: features, normalised per sample and channel over the spatial dims.
        style: either integer style indices ``(B,)`` (one-hot mixing) or mixing weights
            ``(B, S)`` (convex weights give an interpolation of styles).
        weight: the table of per-style scales ``Gamma``.
        bias: the table of per-style shifts ``B``.
        eps: added to the variance.

    Shape:
        - x: ``(B, C, *spatial)``
        - style: ``(B,)`` integer or ``(B, S)`` floating
        - weight, bias: ``(S, C)``
        - output: same as ``x``.
    """
    _check_image(x, "x")
    if weight.dim() != 2 or weight.shape != bias.shape or weight.shape[1] != x.shape[1]:
        raise ValueError(
            f"weight and bias must both be (num_styles, {x.shape[1]}), "
            f"got {tuple(weight.shape)} and {tuple(bias.shape)}"
        )
    batch, num_styles = x.shape[0], weight.shape[0]
    if style.dim() == 1 and not style.is_floating_point():
        if style.shape[0] != batch:
            raise ValueError(f"style indices must be ({batch},), got {tuple(style.shape)}")
        if style.numel() and (int(style.min()) < 0 or int(style.max()) >= num_styles):
            raise ValueError(f"style indices must lie in [0, {num_styles})")
        gamma, beta = weight[style], bias[style]
    elif style.dim() == 2 and style.is_floating_point():
        if style.shape != (batch, num_styles):
            raise ValueError(
                f"style weights must be ({batch}, {num_styles}), got {tuple(style.shape)}"
            )
        gamma, beta = style.to(weight.dtype) @ weight, style.to(bias.dtype) @ bias
    else:
        raise ValueError("style must be integer indices (B,) or floating mixing weights (B, S)")
    return _instance_norm_affine(x, gamma, beta, eps)


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """adaLN modulation of a token sequence by per-sample shift and scale.

    .. math:: y = x \\odot (1 + \\text{scale}) + \\text{shift}

    broadcast over the tokens, in one fused ``addcmul`` computed in float32 (or wider) and
    rounded once to ``x.dtype``: in bfloat16, ``1 + scale`` alone would round to 2^-8 of
    1 and the product carry that error.

    Args:
        x: tokens.
        shift, scale: one vector per sample (batch 1 broadcasts).

    Shape:
        - x: ``(B, T, D)``
        - shift, scale: ``(B, D)`` or ``(1, D)``
        - output: ``(B, T, D)`` in ``x.dtype``.
    """
    _check_tokens(x)
    _check_modulation(x, shift, scale)
    wide = torch.promote_types(x.dtype, torch.float32)
    out = torch.addcmul(shift[:, None].to(wide), x.to(wide), 1 + scale[:, None].to(wide))
    return out.to(x.dtype)


def _check_tokens(x: Tensor) -> None:
    """Raise unless ``x`` is a ``(B, T, D)`` batch of token sequences."""
    if x.dim() != 3:
        raise ValueError(f"x must be (B, T, D), got {tuple(x.shape)}")


def _check_modulation(x: Tensor, shift: Tensor, scale: Tensor) -> None:
    for name, t in (("shift", shift), ("scale", scale)):
        if t.dim() != 2 or t.shape[1] != x.shape[2] or t.shape[0] not in (1, x.shape[0]):
            raise ValueError(f"{name} must be ({x.shape[0]}, {x.shape[2]}), got {tuple(t.shape)}")


def ada_layer_norm(x: Tensor, shift: Tensor, scale: Tensor, eps: float = 1e-6) -> Tensor:
    """Layer norm without affine over the last dim, then :func:`modulate`.

    .. math:: y = \\frac{x - \\mu}{\\sqrt{\\sigma^2 + \\epsilon}} \\odot (1 + \\text{scale})
              + \\text{shift}

    :func:`norms.functional.layer_norm` (torch's native kernel) in float32 or wider,
    followed by :func:`modulate`'s one ``addcmul``: a bfloat16 input is rounded once, at
    the output.

    Shape:
        - x: ``(B, T, D)``
        - shift, scale: ``(B, D)`` or ``(1, D)``
        - output: ``(B, T, D)`` in ``x.dtype``.
    """
    _check_tokens(x)
    wide = x.to(torch.promote_types(x.dtype, torch.float32))
    return modulate(layer_norm(wide, x.shape[-1], eps=eps), shift, scale).to(x.dtype)

"""Independent float64 references of every member's formula, written as plainly as possible.

Each function upcasts to float64, spells out the formula of docs/architecture.md term by term with
elementary tensor operations (no torch normalization kernel, no shared code with
``norms``), and returns float64.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _f64(*tensors: Tensor) -> list[Tensor]:
    return [t.detach().to(torch.float64) for t in tensors]


def spatial_mean_var(x: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and biased variance per (B, C) over the spatial dims, two-pass."""
    (x,) = _f64(x)
    flat = x.reshape(x.shape[0], x.shape[1], -1)
    mean = flat.sum(-1) / flat.shape[-1]
    var = ((flat - mean[..., None]) ** 2).sum(-1) / flat.shape[-1]
    return mean, var


def adain(content: Tensor, style: Tensor, eps: float = 1e-5) -> Tensor:
    c, s = _f64(content, style)
    mean_c, var_c = spatial_mean_var(c)
    mean_s, var_s = spatial_mean_var(s)
    view = mean_c.shape + (1,) * (c.dim() - 2)
    mean_s = mean_s.expand_as(mean_c).reshape(view)
    std_s = torch.sqrt(var_s + eps).expand_as(mean_c).reshape(view)
    normalised = (c - mean_c.reshape(view)) / torch.sqrt(var_c.reshape(view) + eps)
    return std_s * normalised + mean_s


def normalise_last(x: Tensor, eps: float, dims: int = 1) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the last ``dims`` dims, biased variance, two-pass."""
    (x,) = _f64(x)
    reduced = tuple(range(x.dim() - dims, x.dim()))
    n = 1
    for d in reduced:
        n *= x.shape[d]
    mean = x.sum(reduced, keepdim=True) / n
    var = ((x - mean) ** 2).sum(reduced, keepdim=True) / n
    return (x - mean) / torch.sqrt(var + eps)


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    x, shift, scale = _f64(x, shift, scale)
    return x * (1 + scale[:, None]) + shift[:, None]


def ada_layer_norm(x: Tensor, shift: Tensor, scale: Tensor, eps: float = 1e-6) -> Tensor:
    return modulate(normalise_last(x, eps), shift, scale)


def conditional_instance_norm(
    x: Tensor, mix: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5
) -> Tensor:
    """``mix`` is (B, S) mixing weights; tables are (S, C)."""
    x, mix, weight, bias = _f64(x, mix, weight, bias)
    mean, var = spatial_mean_var(x)
    view = mean.shape + (1,) * (x.dim() - 2)
    normalised = (x - mean.reshape(view)) / torch.sqrt(var.reshape(view) + eps)
    return (mix @ weight).reshape(view) * normalised + (mix @ bias).reshape(view)


def layer_norm(x, dims, weight=None, bias=None, eps=1e-5):
    y = normalise_last(x, eps, dims)
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


def rms_norm(x, dims, weight=None, eps=1e-6):
    (x,) = _f64(x)
    reduced = tuple(range(x.dim() - dims, x.dim()))
    y = x / torch.sqrt((x * x).mean(reduced, keepdim=True) + eps)
    return y if weight is None else y * weight.double()


def lp_norm(x, p, dims, weight=None, bias=None, eps=1e-6):
    (x,) = _f64(x)
    reduced = tuple(range(x.dim() - dims, x.dim()))
    y = x / (x.abs().pow(p).mean(reduced, keepdim=True) + eps).pow(1.0 / p)
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


def _channel_affine(y, weight, bias):
    view = (1, -1) + (1,) * (y.dim() - 2)
    if weight is not None:
        y = y * weight.double().reshape(view)
    if bias is not None:
        y = y + bias.double().reshape(view)
    return y


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    (x,) = _f64(x)
    grouped = x.reshape(x.shape[0], num_groups, -1)
    y = normalise_last(grouped, eps).reshape(x.shape)
    return _channel_affine(y, weight, bias)


def instance_norm(x, weight=None, bias=None, eps=1e-5):
    (x,) = _f64(x)
    mean, var = spatial_mean_var(x)
    view = mean.shape + (1,) * (x.dim() - 2)
    y = (x - mean.reshape(view)) / torch.sqrt(var.reshape(view) + eps)
    return _channel_affine(y, weight, bias)


def local_response_norm(x, size, alpha=1e-4, beta=0.75, k=2.0):
    """AlexNet LRN: the channel window [i - size//2, i + size//2] clipped to [0, C)."""
    (x,) = _f64(x)
    half = size // 2
    squares = x * x
    pad = torch.zeros((x.shape[0], half) + x.shape[2:], dtype=torch.float64)
    padded = torch.cat([pad, squares, pad], dim=1)
    window_sum = padded.unfold(1, 2 * half + 1, 1).sum(-1)  # (B, C, *)
    return x / (k + alpha * window_sum) ** beta


def local_mean_2d(x, kernel_size):
    """Mean over the kernel_size^2 window centred at each pixel, clipped to the image."""
    (x,) = _f64(x)
    half = kernel_size // 2
    padded = torch.nn.functional.pad(x, (half, half, half, half))
    ones = torch.nn.functional.pad(torch.ones_like(x), (half, half, half, half))

    def box(t):
        return t.unfold(2, kernel_size, 1).unfold(3, kernel_size, 1).sum((-1, -2))

    return box(padded) / box(ones)


def local_contrast_norm(x, size=5, kernel_size=9, alpha=1e-4, beta=0.75, k=2.0):
    (x,) = _f64(x)
    return local_response_norm(x - local_mean_2d(x, kernel_size), size, alpha, beta, k)


def global_response_norm(x, weight, bias, eps=1e-6):
    x, weight, bias = _f64(x, weight, bias)
    view = (1, -1) + (1,) * (x.dim() - 2)
    g = torch.sqrt((x * x).sum(tuple(range(2, x.dim())), keepdim=True))
    n = g / (g.mean(1, keepdim=True) + eps)
    return weight.reshape(view) * (x * n) + bias.reshape(view) + x


def dynamic_tanh(x, alpha, weight=None, bias=None):
    (x,) = _f64(x)
    y = torch.tanh(float(alpha) * x)
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y

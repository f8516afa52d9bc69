"""Independent float64 references for the batch-statistics members.

Each function upcasts to float64 and spells its formula out with sums and explicit
loops over groups/steps where that is the plainest statement (these are references,
not fast code); nothing here imports ``norms``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def f64(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.detach().to(torch.float64)


def channel_moments(x: Tensor) -> tuple[Tensor, Tensor, int]:
    """Per-channel mean, biased variance and count over every dim but 1 (float64)."""
    x = f64(x)
    flat = x.transpose(0, 1).reshape(x.shape[1], -1)  # (C, n)
    n = flat.shape[1]
    mean = flat.sum(1) / n
    var = ((flat - mean[:, None]) ** 2).sum(1) / n
    return mean, var, n


def bcast(t: Tensor, x: Tensor) -> Tensor:
    """``(C,)`` -> ``(1, C, 1, ...)``."""
    return t.reshape((1, -1) + (1,) * (x.dim() - 2))


def affine(y: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    if weight is not None:
        y = y * bcast(f64(weight), y)
    if bias is not None:
        y = y + bcast(f64(bias), y)
    return y


def batch_norm_train(x, weight=None, bias=None, eps=1e-5):
    """Returns (y, batch mean, unbiased batch variance)."""
    mean, var, n = channel_moments(x)
    y = (f64(x) - bcast(mean, x)) / torch.sqrt(bcast(var, x) + eps)
    return affine(y, weight, bias), mean, var * n / (n - 1)


def batch_norm_eval(x, running_mean, running_var, weight=None, bias=None, eps=1e-5):
    y = (f64(x) - bcast(f64(running_mean), x)) / torch.sqrt(bcast(f64(running_var), x) + eps)
    return affine(y, weight, bias)


def eval_mix(x, running_mean, running_var, a, weight=None, bias=None, eps=1e-5):
    """The paper's formula literally: mu = a E[x] + (1-a) mu_t; var = a E[x^2] + (1-a) E_t[x^2] - mu^2."""
    x64 = f64(x)
    flat = x64.transpose(0, 1).reshape(x.shape[1], -1)
    batch_mean = flat.mean(1)
    batch_sq = (flat**2).mean(1)
    train_sq = f64(running_var) + f64(running_mean) ** 2
    mu = a * batch_mean + (1 - a) * f64(running_mean)
    var = a * batch_sq + (1 - a) * train_sq - mu**2
    y = (x64 - bcast(mu, x)) / torch.sqrt(bcast(var, x) + eps)
    return affine(y, weight, bias)


def ghost_batch_norm_train(x, virtual_batch_size, weight=None, bias=None, eps=1e-5):
    """Loops over the virtual batches; returns (y, mean of means, mean of unbiased vars)."""
    outs, means, vars_ = [], [], []
    for start in range(0, x.shape[0], virtual_batch_size):
        y, mean, var = batch_norm_train(x[start : start + virtual_batch_size], eps=eps)
        outs.append(y)
        means.append(mean)
        vars_.append(var)
    y = affine(torch.cat(outs), weight, bias)
    return y, torch.stack(means).mean(0), torch.stack(vars_).mean(0)


def batch_renorm_train(
    x, running_mean, running_var, r_max, d_max, weight=None, bias=None, eps=1e-5
):
    """Returns (y, r, d) with the clipped corrections per channel."""
    mean, var, _ = channel_moments(x)
    batch_std = torch.sqrt(var + eps)
    train_std = torch.sqrt(f64(running_var) + eps)
    r = torch.clamp(batch_std / train_std, 1 / r_max, r_max)
    d = torch.clamp((mean - f64(running_mean)) / train_std, -d_max, d_max)
    y = (f64(x) - bcast(mean, x)) / bcast(batch_std, x) * bcast(r, x) + bcast(d, x)
    return affine(y, weight, bias), r, d


def masked_moments(values: list[Tensor]) -> tuple[Tensor, Tensor, int]:
    """Mean and biased variance of a list of (C,) vectors, float64."""
    stacked = torch.stack([f64(v) for v in values])  # (n, C)
    n = stacked.shape[0]
    mean = stacked.sum(0) / n
    return mean, ((stacked - mean) ** 2).sum(0) / n, n


def sequence_batch_norm(x, valid, stats, weight=None, bias=None, eps=1e-5):
    """Loops over positions. ``valid`` is (B, T) bool. Returns (y, means, unbiased vars).

    ``means``/``vars`` are (C,) for "sequence" and dicts step -> (C,) for steps with >= 2
    valid values for "frame".
    """
    batch, steps, channels = x.shape
    y = torch.zeros(batch, steps, channels, dtype=torch.float64)
    groups = (
        {"all": [(b, t) for b in range(batch) for t in range(steps) if valid[b, t]]}
        if stats == "sequence"
        else {t: [(b, t) for b in range(batch) if valid[b, t]] for t in range(steps)}
    )
    means, variances = {}, {}
    for key, positions in groups.items():
        if not positions:
            continue
        mean, var, n = masked_moments([x[b, t] for b, t in positions])
        if n >= 2:
            means[key], variances[key] = mean, var * n / (n - 1)
        for b, t in positions:
            out = (f64(x[b, t]) - mean) / torch.sqrt(var + eps)
            if weight is not None:
                out = out * f64(weight)
            if bias is not None:
                out = out + f64(bias)
            y[b, t] = out
    if stats == "sequence":
        return y, means["all"], variances["all"]
    return y, means, variances


def switchable_norm(x, mean_weight, var_weight, weight=None, bias=None, eps=1e-5, bn_stats=None):
    """IN/LN/BN moments reduced separately from x in float64, then mixed.

    ``bn_stats=(mean, var)`` replaces the BN branch (eval with running statistics).
    """
    x64 = f64(x)
    spatial = tuple(range(2, x.dim()))

    def mv(dims):
        mean = x64.mean(dim=dims, keepdim=True)
        return mean, ((x64 - mean) ** 2).mean(dim=dims, keepdim=True)

    in_m, in_v = mv(spatial)
    ln_m, ln_v = mv((1, *spatial))
    if bn_stats is None:
        bn_m, bn_v = mv((0, *spatial))
    else:
        bn_m, bn_v = (bcast(f64(s), x) for s in bn_stats)
    mw, vw = f64(mean_weight), f64(var_weight)
    mean = mw[0] * in_m + mw[1] * ln_m + mw[2] * bn_m
    var = vw[0] * in_v + vw[1] * ln_v + vw[2] * bn_v
    return affine((x64 - mean) / torch.sqrt(var + eps), weight, bias)

"""Triton kernels for statistics over space per channel group: group, instance norm, AdaIN.

One map serves them all: per sample ``b`` and group ``g`` of ``G`` channels,

.. math::
    y_{bcs} = \\frac{x_{bcs} - \\mu_{bg}}{\\sqrt{\\sigma^2_{bg} + \\epsilon}}\\, a_{bc} + t_{bc}

with the per-(sample, channel) affine ``(a, t)`` of shape ``(B or 1, C)``: group norm's
``(weight, bias)``, instance norm's (``G = C``), or AdaIN's style statistics
``(sigma_s, mu_s)`` (``G = C``). Inputs are NCHW or channels_last (any strides with the
channels at dim 1 and the spatial dims flattening to one stride): each program reads a
tile of ``BLOCK_S`` positions by ``BLOCK_C`` channels, contiguous along whichever
dimension is contiguous in memory.

Two launches, so that any shape fills the GPU (a single program per plane would leave
most of it idle for ``B = 1``): the spatial extent is cut into chunks, and

1. ``_partial_moments_kernel`` (grid ``B x channel blocks x chunks``) reduces each chunk
   of each channel to its mean and sum of squared deviations by the shifted two-pass
   form (shift ``k`` = the chunk's first value; ``m = k + S_1 / n``,
   ``M_2 = S_2 - S_1^2 / n``, Chan, Golub & LeVeque 1983), accumulated element-wise in
   float32 tiles and summed once at the end;
2. ``_normalize_kernel`` (same grid) merges the chunks of its channels with Chan's
   parallel formula, ``M_2 = \\sum_i M_{2,i} + n_i (m_i - m)^2``, merges the channels
   of each group the same way, and normalises its own chunk (or, for statistics only,
   writes the per-channel mean and ``sqrt(var + eps)``).

The tensor is read twice and written once. Group sizes must be powers of two (so a
channel block holds whole groups); statistics are in float32 whatever the input dtype.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch import Tensor

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Elements of one tile (BLOCK_S x BLOCK_C) held in registers by a program.
TILE = 2048
#: Aim for at least this many programs per launch, chunking the spatial extent for it.
TARGET_PROGRAMS = 1024


@triton.jit
def _tile_offsets(
    s_start, c_start, s_stride, c_stride, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr
):
    s = s_start + tl.arange(0, BLOCK_S)
    c = c_start + tl.arange(0, BLOCK_C)
    return s, c, s[:, None] * s_stride + c[None, :] * c_stride


@triton.jit
def _partial_moments_kernel(
    x_ptr,
    mean_ptr,
    m2_ptr,
    channels,
    spatial,
    chunk_length,
    b_stride,
    c_stride,
    s_stride,
    BLOCK_S: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    c_start = tl.program_id(1) * BLOCK_C
    chunk = tl.program_id(2)
    s_begin = chunk * chunk_length
    s_end = tl.minimum(s_begin + chunk_length, spatial)
    base = x_ptr + b * b_stride
    c = c_start + tl.arange(0, BLOCK_C)
    c_inside = c < channels
    shift = tl.load(base + s_begin * s_stride + c * c_stride, mask=c_inside, other=0.0)
    shift = shift.to(tl.float32)
    first = tl.zeros((BLOCK_S, BLOCK_C), dtype=tl.float32)
    second = tl.zeros((BLOCK_S, BLOCK_C), dtype=tl.float32)
    for s_start in range(s_begin, s_end, BLOCK_S):
        s, c, offsets = _tile_offsets(s_start, c_start, s_stride, c_stride, BLOCK_S, BLOCK_C)
        inside = (s[:, None] < s_end) & c_inside[None, :]
        x = tl.load(base + offsets, mask=inside, other=0.0).to(tl.float32)
        deviation = tl.where(inside, x - shift[None, :], 0.0)
        first += deviation
        second += deviation * deviation
    count = (s_end - s_begin) * 1.0
    s1 = tl.sum(first, axis=0)
    s2 = tl.sum(second, axis=0)
    out = (b * tl.num_programs(2) + chunk) * channels + c
    tl.store(mean_ptr + out, shift + s1 / count, mask=c_inside)
    tl.store(m2_ptr + out, tl.maximum(s2 - s1 * s1 / count, 0.0), mask=c_inside)


@triton.jit
def _normalize_kernel(
    x_ptr,
    y_ptr,
    mean_ptr,
    m2_ptr,
    scale_ptr,
    shift_ptr,
    stats_mean_ptr,
    stats_std_ptr,
    channels,
    spatial,
    chunk_length,
    num_chunks,
    b_stride,
    c_stride,
    s_stride,
    y_b_stride,
    y_c_stride,
    y_s_stride,
    affine_b_stride,
    eps,
    GROUP: tl.constexpr,
    APPLY: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    HAS_SHIFT: tl.constexpr,
    CHUNKS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    c_start = tl.program_id(1) * BLOCK_C
    chunk = tl.program_id(2)
    c = c_start + tl.arange(0, BLOCK_C)
    c_inside = c < channels
    # merge the chunks of each channel: m = sum(n_i m_i) / n, M2 = sum(M2_i + n_i (m_i - m)^2)
    k = tl.arange(0, CHUNKS)
    k_inside = k < num_chunks
    counts = tl.minimum(spatial - k * chunk_length, chunk_length).to(tl.float32)
    counts = tl.where(k_inside, counts, 0.0)
    partial = (b * num_chunks + k[:, None]) * channels + c[None, :]
    both = k_inside[:, None] & c_inside[None, :]
    means = tl.load(mean_ptr + partial, mask=both, other=0.0)
    m2s = tl.load(m2_ptr + partial, mask=both, other=0.0)
    total = spatial * 1.0
    mean = tl.sum(means * counts[:, None], axis=0) / total
    spread = tl.where(both, means - mean[None, :], 0.0)
    m2 = tl.sum(m2s + counts[:, None] * spread * spread, axis=0)
    # merge the GROUP channels of each group (equal counts)
    grouped_mean = tl.sum(tl.reshape(mean, (BLOCK_C // GROUP, GROUP)), axis=1) / GROUP
    centre = tl.reshape(
        tl.broadcast_to(grouped_mean[:, None], (BLOCK_C // GROUP, GROUP)), (BLOCK_C,)
    )
    apart = mean - centre
    grouped_m2 = tl.sum(tl.reshape(m2 + total * apart * apart, (BLOCK_C // GROUP, GROUP)), axis=1)
    var = tl.reshape(
        tl.broadcast_to(grouped_m2[:, None], (BLOCK_C // GROUP, GROUP)), (BLOCK_C,)
    ) / (total * GROUP)
    std = tl.sqrt_rn(var + eps)
    if APPLY:
        factor = 1.0 / std
        if HAS_SCALE:
            scale = tl.load(scale_ptr + b * affine_b_stride + c, mask=c_inside, other=0.0)
            factor = factor * scale.to(tl.float32)
        offset = tl.zeros((BLOCK_C,), dtype=tl.float32)
        if HAS_SHIFT:
            offset = tl.load(shift_ptr + b * affine_b_stride + c, mask=c_inside, other=0.0)
            offset = offset.to(tl.float32)
        s_begin = chunk * chunk_length
        s_end = tl.minimum(s_begin + chunk_length, spatial)
        for s_start in range(s_begin, s_end, BLOCK_S):
            s, c2, offsets = _tile_offsets(s_start, c_start, s_stride, c_stride, BLOCK_S, BLOCK_C)
            inside = (s[:, None] < s_end) & c_inside[None, :]
            x = tl.load(x_ptr + b * b_stride + offsets, mask=inside, other=0.0).to(tl.float32)
            y = (x - centre[None, :]) * factor[None, :] + offset[None, :]
            out = y_ptr + b * y_b_stride + s[:, None] * y_s_stride + c2[None, :] * y_c_stride
            tl.store(out, y.to(y_ptr.dtype.element_ty), mask=inside)
    else:
        tl.store(stats_mean_ptr + b * channels + c, centre, mask=c_inside)
        tl.store(stats_std_ptr + b * channels + c, std, mask=c_inside)


def _spatial_strides(x: Tensor) -> tuple[int, int, int] | None:
    """``(b_stride, c_stride, s_stride)`` of ``x (B, C, *spatial)`` viewed as ``(B, C, S)``
    (NCHW, channels_last and other layouts whose spatial dims flatten without a copy),
    else ``None``."""
    try:
        flat = x.view(x.shape[0], x.shape[1], -1)
    except RuntimeError:
        return None
    b_stride, c_stride, s_stride = flat.stride()
    return b_stride, c_stride, s_stride


def supports(x: Tensor, num_groups: int) -> bool:
    """Whether the group kernels take ``x (B, C, *spatial)`` with ``num_groups`` groups:
    a supported dtype, groups of a power-of-two size, flattenable spatial strides."""
    if x.dtype not in SUPPORTED_DTYPES or x.dim() < 3 or x.numel() == 0:
        return False
    channels = x.shape[1]
    if num_groups < 1 or channels % num_groups:
        return False
    group = channels // num_groups
    return group & (group - 1) == 0 and _spatial_strides(x) is not None


def _blocks(x: Tensor, group: int, c_stride: int, s_stride: int) -> tuple[int, int]:
    """``(BLOCK_S, BLOCK_C)``: contiguous along channels for channels_last, else space."""
    channels = x.shape[1]
    if c_stride == 1 and s_stride != 1:  # channels_last: a tile row is a run of channels
        block_c = max(group, min(64, triton.next_power_of_2(channels)))
    else:
        block_c = max(group, 1)
    return max(1, TILE // block_c), block_c


def _chunking(batch: int, blocks_c: int, spatial: int, block_s: int) -> tuple[int, int]:
    """``(chunk_length, num_chunks)``: whole tiles per chunk, enough programs in all."""
    wanted = max(1, math.ceil(TARGET_PROGRAMS / (batch * blocks_c)))
    chunks = max(1, min(wanted, math.ceil(spatial / block_s)))
    length = math.ceil(math.ceil(spatial / chunks) / block_s) * block_s
    return length, math.ceil(spatial / length)


def _run(
    x: Tensor,
    num_groups: int,
    eps: float,
    *,
    scale: Tensor | None,
    shift: Tensor | None,
    apply: bool,
    block_s: int | None = None,
    chunk_length: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The two launches; ``(y, mean, std)``, of which ``apply`` fills ``y`` and otherwise
    the per-(sample, channel) ``mean``/``std`` ``(B, C)``; the others are placeholders."""
    batch, channels = x.shape[:2]
    spatial = math.prod(x.shape[2:])
    group = channels // num_groups
    x_strides = _spatial_strides(x)
    assert x_strides is not None  # supports(x) holds
    b_stride, c_stride, s_stride = x_strides
    default_s, block_c = _blocks(x, group, c_stride, s_stride)
    block_s = block_s or default_s
    blocks_c = math.ceil(channels / block_c)
    length, chunks = _chunking(batch, blocks_c, spatial, block_s)
    if chunk_length is not None:
        length, chunks = chunk_length, math.ceil(spatial / chunk_length)
    means = torch.empty(batch, chunks, channels, device=x.device, dtype=torch.float32)
    m2s = torch.empty_like(means)
    grid = (batch, blocks_c, chunks)
    strides = (b_stride, c_stride, s_stride)
    _partial_moments_kernel[grid](
        x, means, m2s, channels, spatial, length, *strides, BLOCK_S=block_s, BLOCK_C=block_c
    )
    dummy = means
    if apply:
        y = torch.empty_like(x)  # keeps x's memory format
        y_layout = _spatial_strides(y)
        assert y_layout is not None  # x's layout
        y_strides = y_layout
        stats_mean = stats_std = dummy
    else:
        y, y_strides = dummy, (0, 0, 0)
        grid = (batch, blocks_c, 1)
        stats_mean = torch.empty(batch, channels, device=x.device, dtype=torch.float32)
        stats_std = torch.empty_like(stats_mean)
    affine_stride = 0
    for tensor in (scale, shift):
        if tensor is not None and tensor.shape[0] > 1:
            affine_stride = channels
    _normalize_kernel[grid](
        x,
        y,
        means,
        m2s,
        dummy if scale is None else scale.contiguous(),
        dummy if shift is None else shift.contiguous(),
        stats_mean,
        stats_std,
        channels,
        spatial,
        length,
        chunks,
        *strides,
        *y_strides,
        affine_stride,
        eps,
        GROUP=group,
        APPLY=apply,
        HAS_SCALE=scale is not None,
        HAS_SHIFT=shift is not None,
        CHUNKS=triton.next_power_of_2(chunks),
        BLOCK_S=block_s,
        BLOCK_C=block_c,
    )
    return y, stats_mean, stats_std


def _affine(param: Tensor | None, channels: int) -> Tensor | None:
    """A ``(C,)`` or ``(B or 1, C)`` affine as a float32 ``(B or 1, C)`` tensor."""
    return None if param is None else param.reshape(-1, channels).to(torch.float32)


def group_norm(
    x: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Group norm of ``x (B, C, *spatial)`` with per-channel ``weight``/``bias`` ``(C,)``
    or per-(sample, channel) ``(B, C)``; output in ``x``'s dtype and memory format."""
    channels = x.shape[1]
    return _run(
        x,
        num_groups,
        eps,
        scale=_affine(weight, channels),
        shift=_affine(bias, channels),
        apply=True,
    )[0]


def channel_mean_std(x: Tensor, eps: float = 1e-5) -> tuple[Tensor, Tensor]:
    """Per-(sample, channel) mean and ``sqrt(var + eps)`` over space, each ``(B, C)`` float32."""
    _, mean, std = _run(x, x.shape[1], eps, scale=None, shift=None, apply=False)
    return mean, std


def adain_with_stats(content: Tensor, mean: Tensor, std: Tensor, eps: float = 1e-5) -> Tensor:
    """``std * (content - mu_c) / sqrt(var_c + eps) + mean`` per (sample, channel), with the
    target statistics ``mean``/``std`` ``(B or 1, C)``."""
    return group_norm(content, content.shape[1], std, mean, eps)


def adain(content: Tensor, style: Tensor, eps: float = 1e-5) -> Tensor:
    """AdaIN: the style's statistics (one launch pair), then the content normalised and
    re-scaled (another); no full-size intermediate."""
    mean, std = channel_mean_std(style, eps)
    return adain_with_stats(content, mean, std, eps)

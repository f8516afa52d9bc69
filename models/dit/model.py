"""A text-conditioned Diffusion Transformer (Peebles & Xie 2023) with adaLN-Zero blocks.

Conditioning: the sinusoidal timestep embedding plus the projected pooled text embedding
form ``c`` (B, D), which drives :class:`norms.AdaLNZero` in every block and
:class:`norms.AdaLN` in the final layer. With ``config.cross_attention`` each block also
attends to the text token states (PixArt-alpha), which is what binds colours to shapes:
pooled MiniLM embeddings of colour-swapped captions are almost identical.

Classifier-free guidance uses a learned null condition: :meth:`DiT.with_null` swaps the
chosen batch items' pooled embedding and tokens for learned vectors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

import norms
from models.dit.config import DiTConfig
from models.text_encoder import TextCondition


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut images into non-overlapping patches, row-major.

    Shape:
        images: ``(B, C, H, W)`` -> ``(B, (H/p) * (W/p), p * p * C)``.
    """
    b, c, h, w = images.shape
    p = patch_size
    if h % p or w % p:
        raise ValueError(f"image {h}x{w} is not divisible by patch size {p}")
    x = images.reshape(b, c, h // p, p, w // p, p)  # (B, C, gh, p, gw, p)
    x = x.permute(0, 2, 4, 3, 5, 1)  # (B, gh, gw, p, p, C)
    return x.reshape(b, (h // p) * (w // p), p * p * c)


def unpatchify(tokens: Tensor, patch_size: int, channels: int) -> Tensor:
    """Inverse of :func:`patchify` for a square grid.

    Shape:
        tokens: ``(B, T, p * p * C)`` with ``T`` a square -> ``(B, C, H, W)``.
    """
    b, t, _ = tokens.shape
    grid = math.isqrt(t)
    if grid * grid != t:
        raise ValueError(f"token count {t} is not a square")
    p = patch_size
    x = tokens.reshape(b, grid, grid, p, p, channels)  # (B, gh, gw, p, p, C)
    x = x.permute(0, 5, 1, 3, 2, 4)  # (B, C, gh, p, gw, p)
    return x.reshape(b, channels, grid * p, grid * p)


def timestep_embedding(t: Tensor, dim: int, max_period: float = 10_000.0) -> Tensor:
    """Sinusoidal features of (possibly fractional) timesteps, as in DiT / DDPM.

    .. math::
        \\omega_i = P^{-i / (d/2)},\\quad
        e(t) = [\\cos(t\\,\\omega_0), \\dots, \\cos(t\\,\\omega_{d/2-1}),
                \\sin(t\\,\\omega_0), \\dots, \\sin(t\\,\\omega_{d/2-1})]

    Shape:
        t: ``(B,)`` -> ``(B, dim)`` float32 (a zero column pads an odd ``dim``).
    """
    half = dim // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half
    )
    angles = t.float()[:, None] * freqs[None]  # (B, half)
    embedding = torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)
    if dim % 2:
        embedding = F.pad(embedding, (0, 1))
    return embedding


def sincos_position_embedding(grid_size: int, dim: int, max_period: float = 10_000.0) -> Tensor:
    """Fixed 2-D sine-cosine position embeddings of a square token grid (as in DiT / MAE).

    Half the channels encode the row, half the column, each with the 1-D features
    ``[sin(r w_0), ..., sin(r w_{k-1}), cos(r w_0), ..., cos(r w_{k-1})]``,
    ``w_i = P^{-i / k}``, ``k = dim / 4``. Tokens are row-major, as :func:`patchify`
    orders them. Fixed rather than learned: a learned table starts at noise scale and
    took thousands of steps to order itself spatially, and until it does every patch
    looks alike to the network (objects came out as scattered patch-sized blobs).

    Shape:
        ``(1, grid_size ** 2, dim)`` float32; ``dim`` must be divisible by 4.
    """
    if dim % 4:
        raise ValueError(f"dim must be divisible by 4 for 2-D sin-cos embeddings, got {dim}")
    quarter = dim // 4
    freqs = max_period ** (-torch.arange(quarter, dtype=torch.float64) / quarter)  # (k,)
    coords = torch.arange(grid_size, dtype=torch.float64)
    angles = coords[:, None] * freqs[None]  # (G, k)
    axis = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)  # (G, dim / 2)
    rows = axis[:, None, :].expand(grid_size, grid_size, dim // 2)
    cols = axis[None, :, :].expand(grid_size, grid_size, dim // 2)
    return torch.cat([rows, cols], dim=-1).reshape(1, grid_size**2, dim).float()


class TimestepEmbedder(nn.Module):
    """Sinusoidal features -> MLP, ``(B,) -> (B, D)``."""

    def __init__(self, width: int, frequency_dim: int) -> None:
        super().__init__()
        self.frequency_dim = frequency_dim
        self.mlp = nn.Sequential(
            nn.Linear(frequency_dim, width), nn.SiLU(), nn.Linear(width, width)
        )

    def forward(self, t: Tensor) -> Tensor:
        embedding: Tensor = self.mlp(timestep_embedding(t, self.frequency_dim))
        return embedding


class Mlp(nn.Sequential):
    """``Linear -> GELU(tanh) -> Linear``, ``(B, T, D) -> (B, T, D)``."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__(
            nn.Linear(width, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, width)
        )


class SelfAttention(nn.Module):
    """Multi-head self-attention over tokens, ``(B, T, D) -> (B, T, D)``."""

    def __init__(self, width: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, self.num_heads, d // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, T, d/H)
        y = F.scaled_dot_product_attention(q, k, v)  # (B, H, T, d/H)
        out: Tensor = self.out(y.transpose(1, 2).reshape(b, t, d))
        return out


class CrossAttention(nn.Module):
    """Tokens attend to the (padded) text tokens.

    Shape:
        x: ``(B, T, D)``; context: ``(B, L, D)``; mask: ``(B, L)`` bool, True = keep
        (every row needs at least one True) -> ``(B, T, D)``.
    """

    def __init__(self, width: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: Tensor, context: Tensor, mask: Tensor) -> Tensor:
        b, t, d = x.shape
        heads, head_dim = self.num_heads, d // self.num_heads
        q = self.q(x).reshape(b, t, heads, head_dim).transpose(1, 2)  # (B, H, T, d/H)
        kv = self.kv(context).reshape(b, context.shape[1], 2, heads, head_dim)
        k, v = kv.permute(2, 0, 3, 1, 4)  # each (B, H, L, d/H)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        out: Tensor = self.out(y.transpose(1, 2).reshape(b, t, d))
        return out


#: Builds an affine norm over the last dim: ``norm_layer(num_features, eps=...)``.
NormFactory = Callable[..., nn.Module]


def norm_factory(name: str) -> NormFactory:
    """The ``norms`` registry's builder of the norm called ``name`` (timm's
    ``norm_layer``): ``norm_factory("rms")(256, eps=1e-6)`` is ``norms.RMSNorm(256,
    eps=1e-6)``."""
    return partial(norms.build, name)


class DiTBlock(nn.Module):
    """adaLN-Zero self-attention and MLP branches, with optional text cross-attention.

    The cross-attention branch is not modulated (PixArt-alpha); its output projection is
    zero-initialised, so, like the gated branches, it starts as the identity.
    """

    def __init__(self, config: DiTConfig, norm_layer: NormFactory) -> None:
        super().__init__()
        width = config.width
        self.adaln = norms.AdaLNZero(width, width, num_branches=2)
        self.attn = SelfAttention(width, config.num_heads)
        self.mlp = Mlp(width, int(width * config.mlp_ratio))
        self.cross_norm = norm_layer(width, eps=1e-6) if config.cross_attention else None
        self.cross_attn = (
            CrossAttention(width, config.num_heads) if config.cross_attention else None
        )

    def forward(self, x: Tensor, c: Tensor, context: Tensor | None, mask: Tensor | None) -> Tensor:
        attn_mod, mlp_mod = self.adaln(c)
        x = x + attn_mod.gate[:, None] * self.attn(self.adaln.normalize(x, attn_mod))
        if self.cross_attn is not None and self.cross_norm is not None:  # both or neither
            x = x + self.cross_attn(self.cross_norm(x), context, mask)
        out: Tensor = x + mlp_mod.gate[:, None] * self.mlp(self.adaln.normalize(x, mlp_mod))
        return out


class FinalLayer(nn.Module):
    """adaLN then a linear map to patch pixels, ``(B, T, D) -> (B, T, p * p * C)``."""

    def __init__(self, config: DiTConfig) -> None:
        super().__init__()
        self.norm = norms.AdaLN(config.width, config.width)
        self.linear = nn.Linear(config.width, config.patch_size**2 * config.in_channels)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        out: Tensor = self.linear(self.norm(x, c))
        return out


class DiT(nn.Module):
    """Text-conditioned DiT predicting ``eps`` or ``v`` (``config.prediction``) of a noisy image.

    Args:
        config: the architecture (stored in checkpoints); ``config.norm`` names the
            token norm, built through :func:`norm_factory`.

    Shape:
        x: ``(B, C, H, W)``; t: ``(B,)`` timesteps; cond: :class:`TextCondition` with
        pooled ``(B, E)``, tokens ``(B, L, E)``, mask ``(B, L)`` -> ``(B, C, H, W)``.
    """

    def __init__(self, config: DiTConfig) -> None:
        super().__init__()
        self.config = config
        width = config.width
        self.patch_embed = nn.Linear(config.patch_size**2 * config.in_channels, width)
        self.register_buffer(
            "pos_embed", sincos_position_embedding(config.grid_size, width), persistent=False
        )
        norm_layer = norm_factory(config.norm)
        self.t_embedder = TimestepEmbedder(width, config.frequency_dim)
        self.text_pooled = nn.Sequential(
            nn.Linear(config.text_dim, width), nn.SiLU(), nn.Linear(width, width)
        )
        self.text_tokens = (
            nn.Sequential(norm_layer(config.text_dim, eps=1e-5), nn.Linear(config.text_dim, width))
            if config.cross_attention
            else None
        )
        self.text_position = (
            nn.Parameter(torch.zeros(config.text_positions, width))
            if config.text_positions
            else None
        )
        self.null_pooled = nn.Parameter(torch.zeros(config.text_dim))
        self.null_token = nn.Parameter(torch.zeros(config.text_dim))
        self.blocks = nn.ModuleList(DiTBlock(config, norm_layer) for _ in range(config.depth))
        self.final = FinalLayer(config)
        self.initialize_weights()

    def initialize_weights(self) -> None:
        """DiT's policy: Xavier linears, N(0, 0.02) timestep MLP, every output gate at zero.

        Zeroed: the adaLN(-Zero) projections (so gates, shifts and scales start at 0),
        the cross-attention output projections and the final linear. Each block is then the identity and the network predicts ``eps = 0`` at
        initialisation.
        """
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        for layer in (self.t_embedder.mlp[0], self.t_embedder.mlp[2]):
            assert isinstance(layer, nn.Linear)
            nn.init.normal_(layer.weight, std=0.02)
        nn.init.normal_(self.null_pooled, std=self.config.text_dim**-0.5)
        nn.init.normal_(self.null_token, std=0.02)
        for block in self.blocks:
            assert isinstance(block, DiTBlock)
            block.adaln.reset_parameters()
            if block.cross_attn is not None:
                nn.init.zeros_(block.cross_attn.out.weight)
                nn.init.zeros_(block.cross_attn.out.bias)
        self.final.norm.reset_parameters()
        nn.init.zeros_(self.final.linear.weight)
        nn.init.zeros_(self.final.linear.bias)

    def with_null(self, cond: TextCondition, drop: Tensor) -> TextCondition:
        """Replace the items where ``drop`` (B,) is True by the learned null condition.

        A dropped item's pooled embedding becomes ``null_pooled`` and its tokens a single
        ``null_token`` (the mask keeps position 0 only). Token length is unchanged.
        """
        pooled, tokens, mask = cond
        drop = drop.to(device=pooled.device, dtype=torch.bool)
        null_mask = torch.zeros_like(mask)
        null_mask[:, 0] = True
        return TextCondition(
            torch.where(drop[:, None], self.null_pooled.to(pooled.dtype), pooled),
            torch.where(drop[:, None, None], self.null_token.to(tokens.dtype), tokens),
            torch.where(drop[:, None], null_mask, mask),
        )

    def null_condition(self, batch_size: int) -> TextCondition:
        """The unconditional condition for ``batch_size`` items (token length 1)."""
        dim, device = self.config.text_dim, self.null_pooled.device
        placeholder = TextCondition(
            torch.zeros(batch_size, dim, device=device),
            torch.zeros(batch_size, 1, dim, device=device),
            torch.ones(batch_size, 1, dtype=torch.bool, device=device),
        )
        return self.with_null(placeholder, torch.ones(batch_size, dtype=torch.bool))

    def forward(self, x: Tensor, t: Tensor, cond: TextCondition) -> Tensor:
        """Predict ``eps`` or ``v``."""
        config = self.config
        tokens = self.patch_embed(patchify(x, config.patch_size)) + self.pos_embed  # (B, T, D)
        c = self.t_embedder(t) + self.text_pooled(cond.pooled)  # (B, D)
        context = self.text_context(cond.tokens)
        for block in self.blocks:
            tokens = block(tokens, c, context, cond.mask)
        out = self.final(tokens, c)  # (B, T, p * p * C)
        return unpatchify(out, config.patch_size, config.in_channels)

    def text_context(self, tokens: Tensor) -> Tensor | None:
        """Project text token states ``(B, L, E)`` to ``(B, L, D)`` for cross-attention.

        ``context = W LN(h) + b`` per token, plus ``position[min(i, P - 1)]`` with
        ``config.text_positions = P``.
        Returns ``None`` without cross-attention.
        """
        if self.text_tokens is None:
            return None
        context: Tensor = self.text_tokens(tokens)
        if self.text_position is not None:
            index = torch.arange(tokens.shape[1], device=tokens.device)
            index = index.clamp_max(self.config.text_positions - 1)
            context = context + self.text_position[index].to(context.dtype)
        return context

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

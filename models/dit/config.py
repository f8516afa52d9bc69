"""The DiT configuration: a frozen dataclass stored inside every checkpoint, and presets."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

#: The ``norms`` registry names a DiT may use for its affine token norms: they normalise
#: the last dim of ``(B, T, D)`` and take ``eps``.
TOKEN_NORMS = ("layer", "rms", "lp")
#: The data world a model of each canvas size trains on: the shapes world is drawn at
#: 32 px, the everyday-things world (which holds the shapes too, on their black canvas)
#: at 64 px.
WORLDS = {32: "shapes", 64: "things"}


@dataclass(frozen=True)
class DiTConfig:
    """Shape of a text-conditioned DiT with adaLN-Zero blocks.

    Args:
        image_size: side of the square input, in pixels.
        in_channels: image channels (3 for RGB).
        patch_size: side of a patch; ``(image_size / patch_size) ** 2`` tokens.
        width: token width ``D`` (divisible by 4: fixed 2-D sin-cos position embeddings).
        depth: number of DiT blocks.
        num_heads: attention heads; ``width`` must be divisible by it.
        mlp_ratio: hidden width of the MLP is ``mlp_ratio * width``.
        text_dim: width of the text encoder's pooled embedding and token states.
        cross_attention: add token-level cross-attention to the text tokens in every block
            (PixArt-alpha style), beside the pooled embedding that feeds adaLN.
        text_positions: with cross-attention, the number of learned, zero-initialised
            embeddings of the token index added to the projected text tokens (0: none).
            They tell the first-named object from the second ("a red circle to the left of
            a white square"); indices past the table share its last row.
        frequency_dim: width of the sinusoidal timestep features.
        num_timesteps: length of the discrete diffusion schedule the model is trained on.
        schedule: name of the noise schedule (see ``models.diffusion.process``).
        prediction: what the network outputs, ``"epsilon"`` or ``"v"``
            (see ``models.diffusion.process``).
        norm: the affine norm layer over the last dim before each cross-attention and on
            the text tokens, by its ``norms`` registry name (``norms.build(norm, D,
            eps=...)``): ``"layer"`` (the checkpoints' layout: ``weight`` and ``bias``),
            ``"rms"`` or ``"lp"``. The adaLN(-Zero) norms are not affected.
    """

    image_size: int = 32
    in_channels: int = 3
    patch_size: int = 4
    width: int = 256
    depth: int = 6
    num_heads: int = 4
    mlp_ratio: float = 4.0
    text_dim: int = 384
    cross_attention: bool = True
    text_positions: int = 0
    frequency_dim: int = 256
    num_timesteps: int = 1000
    schedule: str = "cosine"
    prediction: str = "v"
    norm: str = "layer"

    def __post_init__(self) -> None:
        positive = ("image_size", "in_channels", "patch_size", "width", "depth", "num_heads")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size {self.image_size} is not divisible by patch_size {self.patch_size}"
            )
        if self.width % self.num_heads:
            raise ValueError(f"width {self.width} is not divisible by num_heads {self.num_heads}")
        if self.width % 4:
            raise ValueError(f"width {self.width} must be divisible by 4 (2-D sin-cos positions)")
        if self.prediction not in ("epsilon", "v"):
            raise ValueError(f"prediction must be 'epsilon' or 'v', got {self.prediction!r}")
        if self.mlp_ratio <= 0:
            raise ValueError(f"mlp_ratio must be > 0, got {self.mlp_ratio}")
        if self.text_positions < 0:
            raise ValueError(f"text_positions must be >= 0, got {self.text_positions}")
        if self.text_positions and not self.cross_attention:
            raise ValueError("text_positions needs cross_attention=True")
        if self.norm not in TOKEN_NORMS:
            raise ValueError(f"norm must be one of {list(TOKEN_NORMS)}, got {self.norm!r}")

    @property
    def grid_size(self) -> int:
        """Patches per side."""
        return self.image_size // self.patch_size

    @property
    def num_tokens(self) -> int:
        return self.grid_size**2

    @property
    def world(self) -> str:
        """The data world a model of this canvas size trains on (:data:`WORLDS`)."""
        try:
            return WORLDS[self.image_size]
        except KeyError:
            raise ValueError(
                f"no training data is drawn at {self.image_size} px; sizes: {sorted(WORLDS)}"
            ) from None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DiTConfig:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = json.loads(text)
        unknown = set(values) - fields
        if unknown:
            raise ValueError(f"unknown DiTConfig fields: {sorted(unknown)}")
        return cls(**values)


#: Named configurations. "tiny" and "tiny64" are for tests; "shapes32" is the shapes
#: checkpoint's; "things64" is the everyday-things model's: 64 px in pixels with 8 px
#: patches, so 64 tokens as at 32 px with 4 px patches (the sampling cost per image is
#: set by the token count and the width, and the CPU target is <= 2 s per image),
#: width 192 and depth 8 (about 7 M parameters, 14 MB in bfloat16: a GPU training call
#: brings back files of at most 16 MiB, deploy/device/kit.py).
PRESETS: dict[str, DiTConfig] = {
    "tiny": DiTConfig(width=32, depth=2, num_heads=2, mlp_ratio=2.0, frequency_dim=32),
    "tiny64": DiTConfig(
        image_size=64,
        patch_size=8,
        width=32,
        depth=2,
        num_heads=2,
        mlp_ratio=2.0,
        frequency_dim=32,
        text_positions=8,
    ),
    "things64": DiTConfig(
        image_size=64, patch_size=8, width=192, depth=8, num_heads=6, text_positions=32
    ),
    "shapes32": DiTConfig(width=128, depth=6, num_heads=4, text_positions=32),
    "shapes32-wide": DiTConfig(width=256, depth=6, num_heads=8),
}


def get_preset(name: str) -> DiTConfig:
    """The preset called ``name``; a miss lists the valid names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown DiT preset {name!r}; choose from {sorted(PRESETS)}") from None

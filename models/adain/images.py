"""Image files <-> tensors for the command line and the benchmarks (Pillow), and resizing.

The service has its own hardened decoder; the file helpers are for trusted local files.
:func:`resize_max_side` bounds an image's longer side for the CLI, the benchmarks and the service.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from PIL import Image, ImageOps
from torch import Tensor


def load_image(path: str | Path, *, max_side: int | None = None, mode: str = "RGB") -> Tensor:
    """Read an image (EXIF orientation applied) as ``(1, C, H, W)`` float32 in [0, 1].

    Args:
        path: image file.
        max_side: if given, scale down (never up) so the longer side is at most this.
        mode: Pillow mode, ``"RGB"`` (C = 3) or ``"L"`` (C = 1, for masks).
    """
    with Image.open(path) as image:
        image = ImageOps.exif_transpose(image).convert(mode)
        array = np.asarray(image, dtype=np.float32) / 255.0
    tensor = torch.from_numpy(array.copy())
    tensor = tensor[None, None] if tensor.ndim == 2 else tensor.permute(2, 0, 1)[None]
    return resize_max_side(tensor, max_side) if max_side else tensor


def resize_max_side(image: Tensor, max_side: int) -> Tensor:
    """Shrink so the longer side is at most ``max_side`` (aspect kept; never enlarges).

    With ``s = max_side / max(H, W) < 1`` the new sides are ``max(1, round(H s))`` and
    ``max(1, round(W s))``, by antialiased bilinear interpolation, clamped to ``[0, 1]``;
    an image already small enough is returned as it is.

    Shape:
        ``(..., C, H, W)`` -> ``(..., C, H', W')``, e.g. one ``(C, H, W)`` image or a
        ``(B, C, H, W)`` batch.
    """
    if max_side < 1:
        raise ValueError(f"max_side must be >= 1, got {max_side}")
    height, width = image.shape[-2:]
    scale = max_side / max(height, width)
    if scale >= 1.0:
        return image
    size = (max(1, round(height * scale)), max(1, round(width * scale)))
    batch = image.reshape(-1, *image.shape[-3:])  # (N, C, H, W)
    out = F.interpolate(batch, size=size, mode="bilinear", antialias=True, align_corners=False)
    return out.clamp_(0, 1).reshape(*image.shape[:-2], *size)


def save_image(image: Tensor, path: str | Path) -> Path:
    """Write one ``(1, 3, H, W)`` or ``(3, H, W)`` image in [0, 1] (format from the suffix)."""
    if image.ndim == 4:
        if image.shape[0] != 1:
            raise ValueError(f"save_image writes one image, got a batch of {image.shape[0]}")
        image = image[0]
    array = (image.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255.0).round()
    path = Path(path)
    Image.fromarray(array.astype(np.uint8)).save(path)
    return path

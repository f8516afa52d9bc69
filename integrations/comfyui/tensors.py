"""ComfyUI's IMAGE and MASK tensors to and from encoded pictures.

ComfyUI holds an IMAGE as a float tensor ``(B, H, W, C)`` in ``[0, 1]`` (C = 3, RGB) and
a MASK as ``(B, H, W)`` (or ``(H, W)``) in ``[0, 1]``. Pictures go to the server as PNG
(lossless, 8 bits: ``round(255 x)``) and come back decoded to the same layout.
"""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image


def image_to_png(image: torch.Tensor) -> bytes:
    """One image ``(H, W, C)`` (or ``(1, H, W, C)``) in [0, 1] as PNG bytes (RGB; an
    alpha channel is dropped, one channel is grey)."""
    if image.ndim == 4:
        if image.shape[0] != 1:
            raise ValueError(f"expected one image, got a batch of {image.shape[0]}")
        image = image[0]
    if image.ndim != 3 or image.shape[-1] not in (1, 3, 4):
        raise ValueError(f"expected an IMAGE (H, W, C) with C in 1, 3, 4, got {tuple(image.shape)}")
    pixels = to_uint8(image[..., :3] if image.shape[-1] >= 3 else image.expand(-1, -1, 3))
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, "PNG")
    return buffer.getvalue()


def mask_to_png(mask: torch.Tensor) -> bytes:
    """A MASK ``(H, W)`` or ``(1, H, W)`` in [0, 1] as a greyscale PNG (white = the style)."""
    if mask.ndim == 3:
        mask = mask[0]
    if mask.ndim != 2:
        raise ValueError(f"expected a MASK (H, W), got {tuple(mask.shape)}")
    buffer = io.BytesIO()
    Image.fromarray(to_uint8(mask), "L").save(buffer, "PNG")
    return buffer.getvalue()


def to_uint8(values: torch.Tensor) -> np.ndarray:
    """``round(255 x)`` of ``x`` clipped to [0, 1], as a numpy uint8 array."""
    scaled = values.detach().float().clamp(0.0, 1.0).mul(255.0).round()
    return scaled.to(torch.uint8).cpu().numpy()


def png_to_image(data: bytes) -> torch.Tensor:
    """An encoded picture as an IMAGE ``(1, H, W, 3)`` float32 in [0, 1]."""
    with Image.open(io.BytesIO(data)) as picture:
        pixels = np.asarray(picture.convert("RGB"), dtype=np.float32) / 255.0
    return torch.from_numpy(pixels.copy())[None]


def frames_to_image(frames: np.ndarray) -> torch.Tensor:
    """``(B, H, W, 3)`` uint8 frames as an IMAGE batch ``(B, H, W, 3)`` float32 in [0, 1]."""
    return torch.from_numpy(frames.astype(np.float32) / 255.0)

"""Pictures the client's tests send and read."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def solid_png(colour: tuple[int, int, int], width: int = 48, height: int = 32) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, "PNG")
    return buffer.getvalue()


def noise_png(width: int, height: int, seed: int = 0) -> tuple[bytes, np.ndarray]:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue(), pixels


def pixels_of(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB")).astype(int)

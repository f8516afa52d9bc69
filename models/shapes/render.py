"""Rasterise a :class:`~models.shapes.vocab.Scene` into a 32x32 RGB image.

Shapes are drawn with hard edges in exact palette colours: a pixel belongs to a shape when
its centre ``(i + 0.5, j + 0.5)`` lies inside it. With centre ``(cx, cy)`` and half-extent
``r``:

- circle: ``(x - cx)^2 + (y - cy)^2 <= r^2``
- square: ``|x - cx| <= r`` and ``|y - cy| <= r``
- triangle (apex up): ``cy - r <= y <= cy + r`` and ``|x - cx| <= r * (y - (cy - r)) / (2r)``
"""

from __future__ import annotations

import numpy as np

from models.shapes.vocab import IMAGE_SIZE, PALETTE, RADIUS, Scene, SceneObject

_COORDS = np.arange(IMAGE_SIZE, dtype=np.float64) + 0.5
_X = _COORDS[None, :]
_Y = _COORDS[:, None]


def object_mask(obj: SceneObject) -> np.ndarray:
    """Boolean ``(32, 32)`` mask of the pixels covered by ``obj``."""
    cx, cy = obj.centre
    r = RADIUS[obj.size]
    dx, dy = _X - cx, _Y - cy
    if obj.shape == "circle":
        return dx**2 + dy**2 <= r**2
    if obj.shape == "square":
        return (np.abs(dx) <= r) & (np.abs(dy) <= r)
    # triangle: half-width grows linearly from 0 at the apex (dy = -r) to r at the base
    half_width = (dy + r) / 2.0
    return (np.abs(dy) <= r) & (np.abs(dx) <= half_width)


def render(scene: Scene) -> np.ndarray:
    """Draw ``scene`` on a black canvas.

    Returns:
        ``uint8`` array.

    Shape:
        ``(32, 32, 3)`` (H, W, RGB).
    """
    image = np.zeros((IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    for obj in scene.objects:
        image[object_mask(obj)] = PALETTE[obj.colour]
    return image

"""Colour handling for colour-preserving style transfer (luminance-only transfer).

Gatys et al. (2017) keep the content's colours by transferring style in luminance only:
content and styles are reduced to their luma ``Y``, stylised, and the result's ``Y`` is
recombined with the content's chroma ``Cb, Cr``. Conversions use the full-range
ITU-R BT.601 (JPEG) matrices on RGB in ``[0, 1]``; ``Cb, Cr`` are centred on 0.5.
"""

from __future__ import annotations

import torch
from torch import Tensor

_RGB_TO_YCBCR = torch.tensor(
    [
        [0.299, 0.587, 0.114],
        [-0.168735892, -0.331264108, 0.5],
        [0.5, -0.418687589, -0.081312411],
    ],
    dtype=torch.float64,
)
_OFFSET = torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64)


def _check_rgb(image: Tensor) -> None:
    if image.ndim != 4 or image.shape[1] != 3:
        raise ValueError(f"expected RGB images (B, 3, H, W), got {tuple(image.shape)}")


def rgb_to_ycbcr(image: Tensor) -> Tensor:
    """RGB ``(B, 3, H, W)`` in [0, 1] -> YCbCr ``(B, 3, H, W)`` (Cb, Cr centred on 0.5)."""
    _check_rgb(image)
    matrix = _RGB_TO_YCBCR.to(image.device, image.dtype)
    offset = _OFFSET.to(image.device, image.dtype)
    return torch.einsum("ij,bjhw->bihw", matrix, image) + offset[:, None, None]


def ycbcr_to_rgb(image: Tensor) -> Tensor:
    """Inverse of :func:`rgb_to_ycbcr`."""
    _check_rgb(image)
    inverse = torch.linalg.inv(_RGB_TO_YCBCR).to(image.device, image.dtype)
    offset = _OFFSET.to(image.device, image.dtype)
    return torch.einsum("ij,bjhw->bihw", inverse, image - offset[:, None, None])


def luminance(image: Tensor) -> Tensor:
    """Luma ``Y`` replicated to three channels: ``(B, 3, H, W)``, a grey RGB image."""
    return rgb_to_ycbcr(image)[:, :1].expand(-1, 3, -1, -1)


def with_chroma_of(stylised: Tensor, content: Tensor) -> Tensor:
    """Luma of ``stylised`` with the chroma of ``content``, back in RGB, clamped to [0, 1]."""
    luma = rgb_to_ycbcr(stylised)[:, :1]
    chroma = rgb_to_ycbcr(content)[:, 1:]
    return ycbcr_to_rgb(torch.cat([luma, chroma], dim=1)).clamp(0.0, 1.0)

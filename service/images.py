"""Image I/O for the service: safe decoding with limits, tensors, resizing, encoding.

Decoding order matters for safety: the byte cap is enforced while the body streams in
(see ``service.app``), then Pillow reads only the header, the pixel count is checked,
and only then are pixels decoded. Every failure is a ``ServiceError`` with the status
the API documents (400 bad image, 413 too large, 415 not a supported format).
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps, UnidentifiedImageError
from PIL.PngImagePlugin import PngInfo

from service.errors import BadImage, PayloadTooLarge, UnsupportedMediaType

#: Formats the service decodes (the rest of Pillow's long list is attack surface).
ACCEPTED_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")

#: Output formats: name -> (Pillow format, media type, save options).
OUTPUT_FORMATS = {
    "png": ("PNG", "image/png", {"compress_level": 6}),
    "jpeg": ("JPEG", "image/jpeg", {"quality": 92}),
    "webp": ("WEBP", "image/webp", {"quality": 90}),
}

_SIXTEEN_BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N"}


@dataclass(frozen=True)
class ImageLimits:
    """Limits applied to every decoded upload.

    Args:
        max_pixels: largest ``width * height`` accepted, checked from the header.
        min_side: smallest side accepted (the encoder's pooling needs a few pixels).
    """

    max_pixels: int
    min_side: int = 16


def decode_image(data: bytes, limits: ImageLimits, *, name: str = "image") -> torch.Tensor:
    """Decode an upload to an RGB float tensor in [0, 1], EXIF orientation applied.

    Palette (with or without transparency), alpha, CMYK, greyscale and 16-bit inputs
    are converted; transparency is composited over white.

    Args:
        data: the file bytes.
        limits: pixel and size limits.
        name: the form field, for error messages.

    Shape:
        Output: ``(3, H, W)``, ``float32``.

    Raises:
        BadImage: empty, truncated or corrupt file, animated image, too small.
        PayloadTooLarge: more than ``limits.max_pixels`` pixels (header check).
        UnsupportedMediaType: not a PNG, JPEG, WebP, GIF or BMP image.
    """
    if not data:
        raise BadImage(f"{name}: the file is empty", code="empty_file")
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(data), formats=ACCEPTED_FORMATS)
        except UnidentifiedImageError:
            raise UnsupportedMediaType(
                f"{name}: not an image in a supported format ({', '.join(ACCEPTED_FORMATS)})",
                code="unsupported_image_type",
            ) from None
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            raise PayloadTooLarge(
                f"{name}: image dimensions exceed the pixel limit", code="image_too_large"
            ) from None
        except (OSError, SyntaxError, ValueError) as exc:
            raise BadImage(f"{name}: corrupt image header ({exc})", code="corrupt_image") from None
        with image:
            width, height = image.size
            if width * height > limits.max_pixels:
                raise PayloadTooLarge(
                    f"{name}: {width}x{height} is more than {limits.max_pixels} pixels",
                    code="image_too_large",
                )
            if getattr(image, "is_animated", False) or getattr(image, "n_frames", 1) > 1:
                raise BadImage(f"{name}: animated images are not accepted", code="animated_image")
            try:
                image.load()
                image = ImageOps.exif_transpose(image)
            except (OSError, SyntaxError, ValueError, EOFError) as exc:
                raise BadImage(
                    f"{name}: truncated or corrupt image ({exc})", code="corrupt_image"
                ) from None
            array = _to_rgb_array(image)
    if min(array.shape[0], array.shape[1]) < limits.min_side:
        raise BadImage(
            f"{name}: {array.shape[1]}x{array.shape[0]} is smaller than "
            f"{limits.min_side} px on a side",
            code="image_too_small",
        )
    return torch.from_numpy(array).permute(2, 0, 1).contiguous()


def _to_rgb_array(image: Image.Image) -> np.ndarray:
    """``(H, W, 3)`` float32 in [0, 1] from any Pillow mode."""
    if image.mode in _SIXTEEN_BIT_MODES:
        grey = np.asarray(image, dtype=np.float32) / 65535.0
        return np.repeat(grey[:, :, None], 3, axis=2)
    if image.mode in ("I", "F"):
        grey = np.asarray(image, dtype=np.float32)
        peak = 65535.0 if grey.max(initial=0.0) > 255.0 else 255.0
        return np.repeat(np.clip(grey / peak, 0.0, 1.0)[:, :, None], 3, axis=2)
    has_alpha = image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (
        image.mode == "P" and "transparency" in image.info
    )
    if has_alpha:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, rgba)
    rgb = image.convert("RGB")
    return np.asarray(rgb, dtype=np.float32) / 255.0


def resize_to(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Bilinear (antialiased) resize of ``(C, H, W)`` to ``(C, *size)``, clamped to [0, 1]."""
    if tuple(image.shape[-2:]) == tuple(size):
        return image
    out = F.interpolate(
        image[None], size=size, mode="bilinear", antialias=True, align_corners=False
    )[0]
    return out.clamp_(0.0, 1.0)


def to_grey_mask(image: torch.Tensor) -> torch.Tensor:
    """A mask from an RGB tensor: the channel mean. ``(3, H, W)`` -> ``(1, H, W)``."""
    return image.mean(dim=0, keepdim=True)


def encode_image(
    image: torch.Tensor, fmt: str, parameters: Mapping[str, object] | None = None
) -> tuple[bytes, str]:
    """Encode ``(3, H, W)`` in [0, 1] as PNG, JPEG or WebP.

    ``parameters`` (how the image was made) go into PNG ``tEXt``/``iTXt`` chunks, one
    per key, values as text (JSON for lists and dicts); other formats carry none.

    Returns:
        ``(bytes, media_type)``.
    """
    if fmt not in OUTPUT_FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(OUTPUT_FORMATS)}")
    if image.ndim != 3 or image.shape[0] != 3:
        raise ValueError(f"expected a (3, H, W) tensor, got {tuple(image.shape)}")
    pil_format, media_type, options = OUTPUT_FORMATS[fmt]
    array = (image.detach().float().clamp(0, 1) * 255.0).round().to(torch.uint8)
    pil = Image.fromarray(array.permute(1, 2, 0).cpu().numpy())
    buffer = io.BytesIO()
    if parameters and pil_format == "PNG":
        options = {**options, "pnginfo": _png_text(parameters)}
    pil.save(buffer, format=pil_format, **options)
    return buffer.getvalue(), media_type


def _png_text(parameters: Mapping[str, object]) -> PngInfo:
    info = PngInfo()
    for key, value in parameters.items():
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        info.add_itxt(key, text)  # iTXt: UTF-8, so any prompt survives
    return info

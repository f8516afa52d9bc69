"""Images as tensors, bytes and files: the one codec of the service, the command line,
the training code and the benchmarks.

* pixels: any Pillow image -> ``(3, H, W)`` float32 RGB in ``[0, 1]``
  (:func:`pil_to_tensor`: palettes, alpha over white, CMYK, greyscale, 16 bit) or
  uint8 (:func:`pil_to_uint8`, the service's uploads: no float copy), uint8 -> float
  (:func:`to_float`) and back (:func:`to_uint8`), and ``(3, H, W)`` in ``[0, 1]`` -> an
  8-bit RGB Pillow image (:func:`tensor_to_pil`);
* resizing to a requested longer side: the size (:func:`fit_longer_side`) and the
  resampling (:func:`resize_to`, in the image's own mode), the one way the service's
  uploads, the command line and :func:`load_image` are resized;
* masks: an RGB image's channel mean, ``(..., 3, H, W) -> (..., 1, H, W)``
  (:func:`mask_from_rgb`), however the image was read;
* encoding: PNG, JPEG or WebP bytes, with how the image was made in PNG text chunks
  (:func:`encode_image`), and files (:func:`save_image`); 8-bit pixels as lossless
  PNG bytes and back (:func:`to_png`, :func:`from_png`, :func:`picture_from_png`: a job's
  payload);
* sniffing: what an upload is from its first bytes (:func:`sniff`), the one test the
  service's image decoding and the video code both ask;
* decoding: an opened image -> upright 8-bit RGB at a size (:class:`Decode`: EXIF
  orientation, ICC to sRGB, a JPEG's reduced-scale decode), the one decoder of the
  service's uploads (``service.images`` adds its limits) and of local, trusted files
  (:func:`load_image`).
"""

from __future__ import annotations

import io
import json
import logging
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast, overload

import numpy as np
import torch
from PIL import Image, ImageCms
from torch import Tensor

from models.disk_picture import DiskPicture, Picture, picture_rows
from models.jpeg_strips import decoded_scale, jpeg_strips
from models.png import ROWS_PER_BAND, NotBanded, encode_png, png_bands, png_size

logger = logging.getLogger("atelier.images")

#: Output formats: name -> (Pillow format, media type, save options).
OUTPUT_FORMATS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "png": ("PNG", "image/png", {"compress_level": 6}),
    "jpeg": ("JPEG", "image/jpeg", {"quality": 92}),
    "webp": ("WEBP", "image/webp", {"quality": 90}),
}

#: The longest side each output format can hold (PNG's is far beyond any image here).
FORMAT_MAX_SIDE = {"png": 2**31 - 1, "jpeg": 65_535, "webp": 16_383}

#: Bytes :func:`sniff` reads.
SNIFF_BYTES = 16
#: Still-image formats by their file signature.
_SIGNATURES = {
    b"\x89PNG\r\n\x1a\n": "png", b"\xff\xd8\xff": "jpeg", b"GIF87a": "gif", b"GIF89a": "gif",
    b"BM": "bmp",
}  # fmt: skip
#: ISO-BMFF brands that are audio or still images, not video.
_NOT_VIDEO_BRANDS = {
    b"M4A ", b"M4B ", b"M4P ", b"F4A ", b"heic", b"heix", b"heim", b"heis", b"mif1",
    b"msf1", b"avif", b"avis",
}  # fmt: skip


def sniff(data: bytes) -> str | None:
    """What an upload is from its first ``SNIFF_BYTES`` bytes, decoding nothing: ``"png"``,
    ``"jpeg"``, ``"gif"`` (a still or an animation: its frames tell), ``"bmp"``,
    ``"webp"`` (``RIFF....WEBP``), ``"video"`` (ISO-BMFF ``ftyp`` at offset 4 with a video
    brand: mp4, mov, m4v; EBML ``1A45DFA3``: webm, mkv; ``RIFF....AVI ``), else ``None``."""
    if data[4:8] == b"ftyp":
        return None if data[8:12] in _NOT_VIDEO_BRANDS else "video"
    if data[:4] == b"\x1a\x45\xdf\xa3" or (data[:4] == b"RIFF" and data[8:12] == b"AVI "):
        return "video"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return next((kind for sign, kind in _SIGNATURES.items() if data.startswith(sign)), None)


def check_output_side(fmt: str, side: int) -> None:
    """``ValueError`` naming the limit when ``fmt`` cannot hold a ``side`` px side."""
    if side > FORMAT_MAX_SIDE[fmt]:
        raise ValueError(
            f"{fmt} holds at most {FORMAT_MAX_SIDE[fmt]} px on a side, the image has {side}; "
            "ask for another format or a smaller size"
        )


#: PNGs above this many pixels (print sizes) are written with zlib's fastest level: the
#: default level takes several times as long for a few tenths smaller a file
#: (``benchmarks/print_size.py`` prints both for its largest result).
FAST_PNG_PIXELS = 4_000_000

#: File suffixes :func:`save_image` writes, by output format.
SUFFIXES = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".webp": "webp"}

SIXTEEN_BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N"}


def pil_to_tensor(image: Image.Image) -> Tensor:
    """``(3, H, W)`` float32 RGB in ``[0, 1]`` from any Pillow mode.

    16-bit greyscale keeps its precision (``/ 65535``); 32-bit integer and float
    greyscale are read as 16-bit when above 255, else 8-bit; greyscale is replicated
    to three channels; transparency (alpha, or a palette's transparent index) is
    composited over white.
    """
    if image.mode in SIXTEEN_BIT_MODES:
        grey = np.asarray(image, dtype=np.float32) / 65535.0
        array = np.repeat(grey[:, :, None], 3, axis=2)
    elif image.mode in ("I", "F"):
        grey = np.asarray(image, dtype=np.float32)
        peak = 65535.0 if grey.max(initial=0.0) > 255.0 else 255.0
        array = np.repeat(np.clip(grey / peak, 0.0, 1.0)[:, :, None], 3, axis=2)
    else:
        rgb = _rgb8_array(image)  # (H, W, 3) uint8
        # one float copy, divided in place: a 1024 px photo costs 12.6 MB, not four times that
        out = torch.empty((3, *rgb.shape[:2]), dtype=torch.float32)
        return out.copy_(torch.from_numpy(rgb).permute(2, 0, 1)).div_(255.0)
    return torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous()


def pil_to_uint8(image: Image.Image) -> Tensor:
    """``(3, H, W)`` uint8 RGB from any Pillow mode: :func:`pil_to_tensor`'s conversions,
    rounded to 8 bits (the same values as ``to_uint8(pil_to_tensor(image))``).

    No image becomes float whole (a 16-bit or float one a strip of rows at a time): the
    result is a channel-first view of one ``(H, W, 3)`` array, so a 1024 px photo costs
    3 MB, not the 12.6 MB of its floats.
    """
    return torch.from_numpy(_rgb8_array(image)).permute(2, 0, 1)


def pil_to_picture(image: Image.Image, *, on_disk_above: int) -> Picture:
    """:func:`pil_to_uint8`, written to a :class:`~models.disk_picture.DiskPicture` a
    strip at a time when the image's longer side is above ``on_disk_above`` (a print's
    photo: 201 MB at 8192 px, which its painting reads a tile at a time).

    Shape:
        - output: ``(3, H, W)`` uint8, in memory or on disk.
    """
    if max(image.size) <= on_disk_above:
        return pil_to_uint8(image)
    width, height = image.size
    picture = DiskPicture((3, height, width), torch.uint8)
    for top, strip in _rgb8_strips(image):
        # Pillow's arrays are read-only, which a tensor may not wrap: a strip's copy
        picture.write(top, 0, torch.from_numpy(strip.copy()).permute(2, 0, 1))
    return picture


#: Rows of an image converted to RGB at once (:func:`_rgb8_strips`): a strip's copies
#: (Pillow's crop, its array) add to a print's decode; at 8192 px an 8-bit RGB photo's
#: conversion grows the RSS 205 MB for its 192 MB array, 226 MB at 256 rows
#: (``benchmarks/decode_memory.py --side 8192``, one run each).
RGB8_ROWS_PER_STRIP = 64


def _rgb8_array(image: Image.Image, rows_per_strip: int = RGB8_ROWS_PER_STRIP) -> np.ndarray:
    """``(H, W, 3)`` uint8 of any image (:func:`pil_to_uint8`), from :func:`_rgb8_strips`
    into the one array it returns."""
    width, height = image.size
    out = np.empty((height, width, 3), dtype=np.uint8)
    for top, strip in _rgb8_strips(image, rows_per_strip):
        out[top : top + len(strip)] = strip
    return out


def _rgb8_strips(
    image: Image.Image, rows_per_strip: int = RGB8_ROWS_PER_STRIP
) -> Iterator[tuple[int, np.ndarray]]:
    """``(top, (n, W, 3) uint8)`` strips of any image, top to bottom: an 8-bit one's
    transparency over white; a 16-bit, 32-bit integer or float one's greys as
    :func:`pil_to_tensor` reads them, rounded (:func:`to_uint8`).

    Converted in strips of rows (every conversion is per pixel, and the one image-wide
    figure, the peak of a 32-bit image, is read first, so the strips give the same values
    as the whole): converting an 8192 px photo at once held Pillow's copy of its bytes
    twice more, 400 MB beyond the array's 201 MB; a 16-bit one's RGB floats whole would
    be 12 bytes a pixel (805 MB at 8192 px, by arithmetic).
    """
    if image.mode in SIXTEEN_BIT_MODES or image.mode in ("I", "F"):
        yield from _grey_strips(image, rows_per_strip)
        return
    has_alpha = image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (
        image.mode == "P" and "transparency" in image.info
    )
    width, height = image.size
    for top in range(0, height, rows_per_strip):
        strip = image.crop((0, top, width, min(top + rows_per_strip, height)))
        if has_alpha:
            rgba = strip.convert("RGBA")
            background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            strip = Image.alpha_composite(background, rgba)
        yield top, np.asarray(strip if strip.mode == "RGB" else strip.convert("RGB"))


def _grey_strips(image: Image.Image, rows_per_strip: int) -> Iterator[tuple[int, np.ndarray]]:
    """:func:`_rgb8_strips` of a 16-bit, 32-bit integer or float greyscale image."""
    if image.mode in SIXTEEN_BIT_MODES:
        peak = 65535.0
    else:  # read as 16-bit when above 255, else 8-bit (pil_to_tensor)
        highest = cast(float, image.getextrema()[1])  # one band: (lowest, highest)
        peak = 65535.0 if highest > 255.0 else 255.0
    width, height = image.size
    for top in range(0, height, rows_per_strip):
        strip = image.crop((0, top, width, min(top + rows_per_strip, height)))
        grey = np.clip(np.asarray(strip, dtype=np.float32) / peak, 0.0, 1.0)
        rounded = to_uint8(torch.from_numpy(grey)).numpy()
        yield top, np.repeat(rounded[:, :, None], 3, axis=2)


def to_uint8(image: Tensor) -> Tensor:
    """``(3, H, W)`` float in [0, 1] -> ``(3, H, W)`` uint8, rounded (exact for 8-bit sources)."""
    return image.clamp(0, 1).mul_(255.0).round_().to(torch.uint8)  # one float temporary


def to_float(image: Tensor) -> Tensor:
    """``(..., H, W)`` uint8 (any strides) -> contiguous float32 in [0, 1], one copy: what
    the model is given of a decoded image (the service's and the command line's)."""
    out = torch.empty(image.shape, dtype=torch.float32)
    return out.copy_(image).div_(255.0)


def to_png(image: Picture) -> bytes:
    """``(3, H, W)`` uint8 (in memory or on disk) -> lossless PNG bytes, zlib's fastest
    level (a job's payload: :func:`from_png` and :func:`picture_from_png`, a band at a
    time, give the same pixels back)."""
    return encode_png(image, level=1)


def from_png(data: bytes) -> Tensor:
    """:func:`to_png`'s bytes -> ``(3, H, W)`` uint8 (:func:`pil_to_uint8`)."""
    with Image.open(io.BytesIO(data)) as image:
        return pil_to_uint8(image)


def picture_from_png(data: bytes, *, on_disk_above: int) -> Picture:
    """:func:`from_png`, kept on disk when the longer side is above ``on_disk_above`` (a
    print's photo): :func:`to_png`'s bytes written a band at a time as they are read
    (:func:`~models.png.png_bands`: no whole copy), a PNG that is not 8-bit RGB or is
    interlaced through Pillow's whole decode (:func:`pil_to_picture`).

    Raises:
        ValueError: a corrupt PNG.
    """
    height, width = png_size(data)
    if max(height, width) <= on_disk_above:
        return from_png(data)
    picture = DiskPicture((3, height, width), torch.uint8)
    try:
        for top, band in png_bands(data):
            picture.write(top, 0, torch.from_numpy(band).permute(2, 0, 1))
    except NotBanded:
        picture.close()
        with Image.open(io.BytesIO(data)) as image:
            return pil_to_picture(image, on_disk_above=on_disk_above)
    return picture


def thumbnail_size(width: int, height: int, side: int) -> tuple[int, int]:
    """``(width, height)`` of what ``Image.thumbnail((side, side))`` makes of a ``width``
    x ``height`` picture: itself when it fits; else its longer side ``side`` and the
    other the floor or the ceiling of its exact value, whichever keeps the aspect closer
    (the floor on a tie), at least 1."""
    if width <= side and height <= side:
        return width, height
    aspect = width / height
    if aspect <= 1:
        exact = side * aspect
        across = min(math.floor(exact), math.ceil(exact), key=lambda n: abs(aspect - n / side))
        return max(across, 1), side
    exact = side / aspect
    down = min(
        math.floor(exact), math.ceil(exact), key=lambda n: 0 if n == 0 else abs(aspect - side / n)
    )
    return side, max(down, 1)


#: Pillow's ``thumbnail`` first reduces by whole factors to at most this many times the
#: size (its ``reducing_gap``), then resamples.
THUMBNAIL_REDUCING_GAP = 2.0


def png_thumbnail(data: bytes, side: int) -> Image.Image | None:
    """What ``Image.thumbnail((side, side), LANCZOS)`` makes of an 8-bit RGB PNG, the
    same pixels, read a band of rows at a time (:func:`~models.png.png_bands`): Pillow
    first averages ``fx`` x ``fy`` boxes of pixels, ``f = floor(side_in / side_out /
    THUMBNAIL_REDUCING_GAP)`` (at least 1) along each axis, and then resamples the
    reduced picture with ``box = (0, 0, W / fx, H / fy)``; each band here holds a whole
    number of boxes, so the reduced bands put together are Pillow's reduced picture.
    An 8192 px print's thumbnail holds a band (1.5 MB) and the reduced picture, not the
    whole decode (268 MB).

    Returns:
        The thumbnail (RGB); ``None`` when no factor is above 1 (the picture is under
        twice the thumbnail's size on both axes: small, read whole by the caller).

    Raises:
        NotBanded: not an 8-bit RGB PNG without interlace.
        ValueError: a corrupt PNG.
    """
    height, width = png_size(data)
    size = thumbnail_size(width, height, side)
    across = int(width / size[0] / THUMBNAIL_REDUCING_GAP) or 1
    down = int(height / size[1] / THUMBNAIL_REDUCING_GAP) or 1
    if size == (width, height) or (across, down) == (1, 1):
        return None
    reduced = Image.new("RGB", (-(-width // across), -(-height // down)))
    rows = down * -(-ROWS_PER_BAND // down)
    for top, band in png_bands(data, rows):
        reduced.paste(Image.fromarray(band).reduce((across, down)), (0, top // down))
    box = (0.0, 0.0, width / across, height / down)
    return reduced.resize(size, Image.Resampling.LANCZOS, box=box)


def tensor_to_pil(image: Picture, rows_per_strip: int = RGB8_ROWS_PER_STRIP) -> Image.Image:
    """An 8-bit RGB Pillow image of ``(3, H, W)`` in ``[0, 1]`` (clamped, rounded), or of
    ``(3, H, W)`` uint8 as it is (in memory or on disk).

    Copied in strips of rows: no whole ``(H, W, 3)`` copy of a channel-first tensor
    (201 MB at 8192 px) is made beside Pillow's own.
    """
    if len(image.shape) != 3 or image.shape[0] != 3:
        raise ValueError(f"expected a (3, H, W) tensor, got {tuple(image.shape)}")
    height, width = image.shape[-2:]
    pil = Image.new("RGB", (width, height))
    for top in range(0, height, rows_per_strip):
        strip = picture_rows(image, top, top + rows_per_strip).detach().cpu()
        if strip.dtype != torch.uint8:
            strip = (strip.float().clamp(0, 1) * 255.0).round().to(torch.uint8)
        pil.paste(Image.fromarray(strip.permute(1, 2, 0).numpy()), (0, top))
    return pil


def mask_from_rgb(image: Tensor) -> Tensor:
    """A mask from an RGB image: the channel mean. ``(..., 3, H, W)`` -> ``(..., 1, H, W)``."""
    return image.mean(dim=-3, keepdim=True)


def encode_image(
    image: Picture | Image.Image,
    fmt: str,
    parameters: Mapping[str, object] | None = None,
    *,
    quality: int | None = None,
) -> tuple[bytes, str]:
    """Encode ``(3, H, W)`` in [0, 1] (or uint8; in memory or on disk) as PNG, JPEG or
    WebP; or an RGB Pillow image, :func:`tensor_to_pil`'s (a caller that lets its tensor
    go first holds one copy of a big picture while Pillow compresses JPEG or WebP, not
    two). A PNG is written a band of rows at a time (:func:`~models.png.encode_png`).

    ``parameters`` (how the image was made) go into PNG ``iTXt`` chunks, one per key,
    values as text (JSON for anything but a string; ``None`` values are left out);
    other formats carry none. ``quality`` (1-100) sets JPEG's and WebP's quality (default
    92 and 90); PNG is lossless and has none.

    Returns:
        ``(bytes, media_type)``.
    """
    if fmt not in OUTPUT_FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(OUTPUT_FORMATS)}")
    check_output_side(fmt, max(image.size if isinstance(image, Image.Image) else image.shape[-2:]))
    pil_format, media_type, options = OUTPUT_FORMATS[fmt]
    if pil_format == "PNG":
        pixels = pil_to_uint8(image) if isinstance(image, Image.Image) else image
        big = pixels.shape[-2] * pixels.shape[-1] > FAST_PNG_PIXELS
        level = 1 if big else options["compress_level"]
        return encode_png(pixels, png_text(parameters or {}), level=level), media_type
    pil = image if isinstance(image, Image.Image) else tensor_to_pil(image)
    extra: dict[str, Any] = dict(options)
    if quality is not None:
        if not 1 <= quality <= 100:
            raise ValueError(f"quality must be in [1, 100], got {quality}")
        extra["quality"] = quality
    buffer = io.BytesIO()
    pil.save(buffer, format=pil_format, **extra)
    return buffer.getvalue(), media_type


def enlarge_png(data: bytes, side: int) -> bytes:
    """A square PNG enlarged to ``side`` x ``side`` px by Lanczos resampling, its text
    chunks (how it was made) kept and ``upscaled_from`` (``"WxH"``) added: a bigger
    picture of the same drawing, no detail invented.

    Raises:
        ValueError: ``side`` is smaller than the image.
    """
    with Image.open(io.BytesIO(data)) as image:
        if side < max(image.size):
            raise ValueError(f"enlarge_png enlarges: {side} px is under {image.size}")
        text = {**getattr(image, "text", {}), "upscaled_from": f"{image.width}x{image.height}"}
        enlarged = image.convert("RGB").resize((side, side), Image.Resampling.LANCZOS)
    return encode_png(pil_to_uint8(enlarged), text)


def png_text(parameters: Mapping[str, object]) -> dict[str, str]:
    """How an image was made as PNG text entries: strings as they are, anything else as
    JSON; ``None`` values left out (written as UTF-8 ``iTXt``, so any prompt survives)."""
    return {
        key: value if isinstance(value, str) else json.dumps(value)
        for key, value in parameters.items()
        if value is not None
    }


def save_image(
    image: Tensor,
    path: str | Path,
    parameters: Mapping[str, object] | None = None,
    *,
    quality: int | None = None,
) -> Path:
    """Write one ``(1, 3, H, W)`` or ``(3, H, W)`` image in [0, 1] with :func:`encode_image`,
    the format from the suffix (``.png``, ``.jpg``/``.jpeg``, ``.webp``), ``quality`` for
    JPEG and WebP."""
    path = Path(path)
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"{path}: unknown image suffix; expected one of {sorted(SUFFIXES)}")
    if image.ndim == 4:
        if image.shape[0] != 1:
            raise ValueError(f"save_image writes one image, got a batch of {image.shape[0]}")
        image = image[0]
    path.write_bytes(encode_image(image, fmt, parameters, quality=quality)[0])
    return path


#: Modes whose embedded ICC profile is converted to sRGB (the output mode beside).
_ICC_MODES = {"RGB": "RGB", "RGBA": "RGBA", "CMYK": "RGB", "L": "RGB"}
_SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))


def to_srgb(image: Image.Image, profile: bytes, name: str = "image") -> Image.Image:
    """``image`` converted from its embedded ICC ``profile`` to sRGB (perceptual intent),
    so that a wide-gamut (Display P3, Adobe RGB) or print (CMYK) photo keeps its colours.
    An image without a profile is taken as sRGB already. A profile that cannot be read
    or does not fit the image's mode is ignored (logged): the image is decoded as if it
    had none, as browsers do, rather than refused.
    """
    output = _ICC_MODES.get(image.mode)
    if output is None:
        return image
    try:
        source = ImageCms.ImageCmsProfile(io.BytesIO(profile))
        converted = ImageCms.profileToProfile(image, source, _SRGB, outputMode=output)
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError) as exc:
        logger.info("icc profile ignored", extra={"image": name, "error": str(exc)})
        return image
    return image if converted is None else converted


#: EXIF orientation -> the transpose that displays the image upright (EXIF 2.3, 0x0112).
_ORIENTATION_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
#: The transposes that swap width and height.
_SWAPPING_TRANSPOSES = (
    Image.Transpose.TRANSPOSE,
    Image.Transpose.ROTATE_270,
    Image.Transpose.TRANSVERSE,
    Image.Transpose.ROTATE_90,
)


@dataclass(frozen=True)
class Decode:
    """How an opened image becomes upright 8-bit RGB pixels: its EXIF ``transpose``, its
    ICC ``profile``, the ``target`` ``(width, height)`` to shrink it to in its stored
    orientation (``None``: kept), and its ``name`` for the logs. Made by :meth:`plan`, run by :meth:`pixels`: the one
    decoder of uploads (``service.images.decode_image``) and files (:func:`load_image`).
    """

    image: Image.Image
    transpose: Image.Transpose | None
    profile: bytes | None
    target: tuple[int, int] | None
    name: str = "image"
    #: the file's bytes, where a JPEG kept on disk may be decoded in strips
    data: bytes | None = field(default=None, repr=False)
    #: the scale a JPEG decodes at (``draft``): 1, 2, 4 or 8
    scale: int = 1

    @classmethod
    def plan(
        cls,
        image: Image.Image,
        choose: Callable[[tuple[int, int]], tuple[int, int] | None],
        name: str = "image",
        data: bytes | None = None,
    ) -> Decode:
        """Read the orientation (a PNG's EXIF may follow its pixels: reading it decodes
        them), ask ``choose`` the target for the size as displayed ``(width, height)``
        (it may refuse by raising), and set a JPEG to decode at the smallest of 1/1, 1/2,
        1/4, 1/8 scale still at least that target (``draft``). ``data``: the bytes
        ``image`` was opened from (see :meth:`pixels`)."""
        transpose = _ORIENTATION_TRANSPOSE.get(_orientation(image))
        swapped = transpose in _SWAPPING_TRANSPOSES
        width, height = image.size
        target = choose((height, width) if swapped else (width, height))
        if target is not None and swapped:
            target = (target[1], target[0])  # in the stored orientation
        scale = 1
        if target is not None and image.format == "JPEG":
            image.draft(image.mode, target)
            scale = decoded_scale((width, height), image.size)
        return cls(image, transpose, image.info.get("icc_profile"), target, name, data, scale)

    @overload
    def pixels(self) -> Tensor: ...
    @overload
    def pixels(self, *, on_disk_above: int) -> Picture: ...
    def pixels(self, *, on_disk_above: int | None = None) -> Picture:
        """Decode, shrink in the image's own mode (:func:`resize_to`: a greyscale 6300 px
        PNG is 40 MB, never its RGB floats), convert the ICC profile to sRGB on the
        shrunk image (:func:`to_srgb`), turn it upright, and round to 8 bits
        (:func:`pil_to_uint8`, 16-bit inputs too, as every input of the model is).
        ``on_disk_above``: a result with a longer side above it is kept on disk
        (:func:`pil_to_picture`).

        A JPEG kept on disk, greyscale or RGB, whose bytes the plan has and whose target
        is a size it decodes at directly (no resize left), is decoded a strip at a time
        instead (:meth:`_strips_to_disk`): the same steps and pixels, never whole.

        Shape:
            Output: ``(3, H, W)`` uint8, as displayed.
        """
        if on_disk_above is not None and self._decodes_in_strips(on_disk_above):
            return self._strips_to_disk()
        self.image.load()
        small = resize_to(self.image, self.image.size if self.target is None else self.target)
        if self.profile:
            small = to_srgb(small, self.profile, self.name)
        if self.transpose is not None:
            small = small.transpose(self.transpose)
        if on_disk_above is None:
            return pil_to_uint8(small)
        return pil_to_picture(small, on_disk_above=on_disk_above)

    def _decodes_in_strips(self, on_disk_above: int) -> bool:
        return (
            self.data is not None
            and self.image.format == "JPEG"
            and self.image.mode in ("RGB", "L")
            and self.target in (None, self.image.size)  # the drafted size: no resize
            and max(self.image.size) > on_disk_above
        )

    def _strips_to_disk(self) -> DiskPicture:
        """:meth:`pixels` of a JPEG a strip at a time (:func:`~models.jpeg_strips.jpeg_strips`),
        each converted to sRGB and to RGB as the whole image is, and written upright to
        the picture on disk (:func:`_place_strip`). A profile that :func:`to_srgb`
        ignores is ignored from the first strip on (logged once)."""
        assert self.data is not None  # _decodes_in_strips
        width, height = self.image.size  # drafted: the target
        swapped = self.transpose in _SWAPPING_TRANSPOSES
        picture = DiskPicture((3, width, height) if swapped else (3, height, width), torch.uint8)
        profile = self.profile
        for top, strip in jpeg_strips(self.data, self.scale, RGB8_ROWS_PER_STRIP):
            image = Image.fromarray(strip[:, :, 0] if strip.shape[2] == 1 else strip)
            if profile:
                converted = to_srgb(image, profile, self.name)
                profile = None if converted is image else profile
                image = converted
            rgb = torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1)
            _place_strip(picture, top, rgb, self.transpose, height)
        return picture


#: Where a strip of the stored image goes in the upright one, per EXIF transpose:
#: ``(swapped, flipped dims, counted from the bottom)``: the strip ``(3, n, W)`` is
#: transposed to ``(3, W, n)`` when the transpose swaps the sides (it becomes columns),
#: flipped along those dims, and its offset is counted from the stored bottom when the
#: stored rows run upwards in the upright image.
_STRIP_PLACEMENT: dict[Image.Transpose | None, tuple[bool, tuple[int, ...], bool]] = {
    None: (False, (), False),
    Image.Transpose.FLIP_LEFT_RIGHT: (False, (2,), False),
    Image.Transpose.FLIP_TOP_BOTTOM: (False, (1,), True),
    Image.Transpose.ROTATE_180: (False, (1, 2), True),
    Image.Transpose.TRANSPOSE: (True, (), False),
    Image.Transpose.ROTATE_90: (True, (1,), False),
    Image.Transpose.ROTATE_270: (True, (2,), True),
    Image.Transpose.TRANSVERSE: (True, (1, 2), True),
}


def _place_strip(
    picture: DiskPicture,
    top: int,
    strip: Tensor,
    transpose: Image.Transpose | None,
    stored_height: int,
) -> None:
    """Write ``strip``, rows ``top:top + n`` of the stored image ``(3, n, W)``, where
    ``transpose`` puts them in the upright ``picture``."""
    swapped, flipped, from_bottom = _STRIP_PLACEMENT[transpose]
    placed = strip.transpose(1, 2) if swapped else strip
    if flipped:
        placed = placed.flip(flipped)
    offset = stored_height - top - strip.shape[1] if from_bottom else top
    if swapped:
        picture.write(0, offset, placed)
    else:
        picture.write(offset, 0, placed)


def _orientation(image: Image.Image) -> int:
    try:
        return int(image.getexif().get(0x0112, 1))
    except (OSError, SyntaxError, ValueError, TypeError):
        return 1  # unreadable EXIF: shown as stored


def load_image(
    path: str | Path, *, max_side: int | None = None, size: tuple[int, int] | None = None
) -> Tensor:
    """Read a trusted image file as ``(1, 3, H, W)`` float32 in [0, 1], decoded as an
    upload is (:class:`Decode`: EXIF orientation, ICC to sRGB, 8 bits) without the
    service's limits; ``max_side``: scale down (never up) so the longer side is at most
    this (:func:`fit_longer_side`); ``size``: to exactly ``(H, W)``."""

    def choose(shown: tuple[int, int]) -> tuple[int, int] | None:
        if size is not None:
            return (size[1], size[0])
        return fit_longer_side(*shown, max_side) if max_side else None

    with Image.open(path) as image:
        return to_float(Decode.plan(image, choose, str(path)).pixels())[None]


def fit_longer_side(width: int, height: int, size: int, *, min_side: int = 1) -> tuple[int, int]:
    """The ``(width, height)`` an image is resized to for a requested longer side ``size``.

    The scale is ``s = min(1, size / max(w, h))``, raised to ``min_side / min(w, h)``
    when the shorter side would fall under ``min_side``; the sides are
    ``max(1, round(w s))`` and ``max(1, round(h s))``. The image is never enlarged and
    keeps its aspect; raising ``s`` can push the longer side past ``size`` (the service
    refuses images too elongated for its limits: ``service.images.output_size``).
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    longer, shorter = max(width, height), min(width, height)
    scale = min(1.0, size / longer)
    if shorter * scale < min_side:
        scale = min(1.0, min_side / shorter)
    return max(1, round(width * scale)), max(1, round(height * scale))


#: Pillow shrinks by an integer factor (box filter, cheap) down to at most this many
#: times the target before the bilinear pass (``Image.resize(reducing_gap=...)``).
REDUCING_GAP = 2.0

#: Modes Pillow resizes as they are; any other is converted to RGB(A) first.
RESIZABLE_MODES = {"L", "LA", "RGB", "RGBA", "CMYK", "I", "F", "I;16"}


def resize_to(image: Image.Image, target: tuple[int, int]) -> Image.Image:
    """``image`` resized to ``target = (width, height)`` in its own (8-bit or 16-bit)
    mode: bilinear, antialiased when it shrinks, after an integer box reduction down to
    ``REDUCING_GAP`` times the target (a large photo shrinks in a fraction of the time and
    memory of its RGB floats). Modes Pillow cannot resize are converted first (16-bit to
    ``I``, palettes and the rest to ``RGB``, or ``RGBA`` when transparent)."""
    if image.mode in SIXTEEN_BIT_MODES and image.mode not in RESIZABLE_MODES:
        image = image.convert("I")
    elif image.mode not in RESIZABLE_MODES:
        has_alpha = "A" in image.mode or "transparency" in image.info
        image = image.convert("RGBA" if has_alpha else "RGB")
    if image.size == target:
        return image
    return image.resize(target, Image.Resampling.BILINEAR, reducing_gap=REDUCING_GAP)

"""The bad-input corpus, generated in code (no binary fixtures in the repository).

Each builder returns the bytes of one kind of awkward upload. ``STYLIZE_CASES`` pairs a
multipart request with the status the API documents for it (see ``service.errors``);
``GENERATE_CASES`` does the same for the JSON route.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass, field

import numpy as np
from PIL import Image


def _save(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def noise_rgb(width: int = 48, height: int = 32, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def png(width: int = 48, height: int = 32, seed: int = 0) -> bytes:
    return _save(noise_rgb(width, height, seed), "PNG")


def jpeg(width: int = 48, height: int = 32, seed: int = 0) -> bytes:
    return _save(noise_rgb(width, height, seed), "JPEG", quality=90)


def solid_png(rgb: tuple[int, int, int], width: int = 40, height: int = 24) -> bytes:
    return _save(Image.new("RGB", (width, height), rgb), "PNG")


def empty() -> bytes:
    return b""


def text() -> bytes:
    return b"this is a plain text file, certainly not an image\n" * 4


def truncated_png() -> bytes:
    data = png(64, 64)
    return data[: len(data) // 2]


def truncated_jpeg() -> bytes:
    data = jpeg(64, 64)
    return data[: len(data) // 2]


def one_by_one() -> bytes:
    return _save(Image.new("RGB", (1, 1), (10, 20, 30)), "PNG")


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width x height`` RGB pixels, with one scanline of data.

    Decoding the pixels would need ``3 * width * height`` bytes; the header alone is what
    the service must look at.
    """

    def chunk(kind: bytes, payload: bytes) -> bytes:
        body = kind + payload
        return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" + b"\x00" * 3 * min(width, 1024))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def png_with_bad_ihdr_crc() -> bytes:
    """A PNG (right signature) whose IHDR checksum is wrong."""
    data = bytearray(png(32, 32))
    data[29] ^= 0xFF  # the IHDR CRC: 8 signature + 4 length + 4 type + 13 data bytes
    return bytes(data)


def elongated(width: int = 16, height: int = 2000) -> bytes:
    return png(width, height)


def huge_header() -> bytes:
    return png_header(30_000, 30_000)


def cmyk_jpeg() -> bytes:
    return _save(Image.new("CMYK", (40, 24), (0, 255, 255, 0)), "JPEG", quality=95)


def png_16bit(width: int = 40, height: int = 24) -> bytes:
    ramp = np.linspace(0, 65535, width * height, dtype=np.float64).reshape(height, width)
    return _save(Image.fromarray(ramp.astype(np.uint16)), "PNG")


def palette_with_transparency() -> bytes:
    image = Image.new("P", (40, 24), 0)
    image.putpalette([255, 0, 0, 0, 0, 255] + [0] * (256 * 3 - 6))
    image.paste(1, (0, 0, 20, 24))  # left half: blue; right half: index 0 = transparent red
    return _save(image, "PNG", transparency=0)


def animated_gif() -> bytes:
    frames = [Image.new("RGB", (32, 32), colour) for colour in ((255, 0, 0), (0, 255, 0))]
    return _save(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)


def exif_rotated_jpeg(width: int = 48, height: int = 24) -> bytes:
    """A landscape JPEG with EXIF orientation 6: it displays as portrait (height x width)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    return _save(noise_rgb(width, height), "JPEG", exif=exif.tobytes())


def tiff() -> bytes:
    return _save(noise_rgb(32, 32), "TIFF")


@dataclass(frozen=True)
class StylizeCase:
    """One multipart request to ``POST /v1/stylize`` and its documented status."""

    name: str
    status: int
    content: bytes | None = None
    styles: tuple[bytes, ...] = ()
    masks: tuple[bytes, ...] = ()
    fields: dict = field(default_factory=dict)
    code: str | None = None

    def multipart(self) -> list[tuple[str, tuple[str, bytes, str]]]:
        files = []
        if self.content is not None:
            files.append(("content", ("content.bin", self.content, "application/octet-stream")))
        files += [("style", (f"style{i}.png", s, "image/png")) for i, s in enumerate(self.styles)]
        files += [("mask", (f"mask{i}.png", m, "image/png")) for i, m in enumerate(self.masks)]
        return files


def _style() -> tuple[bytes, ...]:
    return (png(32, 32, seed=1),)


STYLIZE_CASES: tuple[StylizeCase, ...] = (
    StylizeCase("empty", 400, empty(), _style(), code="empty_file"),
    StylizeCase("text", 415, text(), _style(), code="unsupported_image_type"),
    StylizeCase("tiff", 415, tiff(), _style(), code="unsupported_image_type"),
    StylizeCase("truncated_png", 400, truncated_png(), _style(), code="corrupt_image"),
    StylizeCase("truncated_jpeg", 400, truncated_jpeg(), _style(), code="corrupt_image"),
    StylizeCase("one_by_one", 400, one_by_one(), _style(), code="image_too_small"),
    StylizeCase("huge_header", 413, huge_header(), _style(), code="image_too_large"),
    # an animated GIF is a video: a job, never answered at once
    StylizeCase("animated_gif", 422, animated_gif(), _style(), code="send_as_job"),
    StylizeCase("empty_style", 400, png(), (empty(),), code="empty_file"),
    StylizeCase("cmyk_jpeg", 200, cmyk_jpeg(), _style()),
    StylizeCase("png_16bit", 200, png_16bit(), _style()),
    StylizeCase("palette_transparency", 200, palette_with_transparency(), _style()),
    StylizeCase("exif_rotated", 200, exif_rotated_jpeg(), _style()),
    StylizeCase("alpha_not_a_number", 422, png(), _style(), fields={"alpha": "lots"}),
    StylizeCase("preserve_color_not_bool", 422, png(), _style(), fields={"preserve_color": "hm"}),
    StylizeCase("size_not_int", 422, png(), _style(), fields={"size": "big"}),
    StylizeCase("alpha_above_one", 422, png(), _style(), fields={"alpha": "1.5"}),
    StylizeCase("alpha_negative", 422, png(), _style(), fields={"alpha": "-0.1"}),
    StylizeCase("size_zero", 422, png(), _style(), fields={"size": "0"}),
    StylizeCase("size_above_max_side", 422, png(), _style(), fields={"size": "100000"}),
    StylizeCase("unknown_format", 422, png(), _style(), fields={"format": "gif"}),
    StylizeCase("no_content", 422, None, _style()),
    StylizeCase("no_style", 422, png(), ()),
    StylizeCase("too_many_styles", 422, png(), tuple(png(seed=s) for s in range(5))),
    StylizeCase("weights_not_numbers", 422, png(), _style() * 2, fields={"style_weights": "a,b"}),
    StylizeCase("weights_wrong_count", 422, png(), _style() * 2, fields={"style_weights": "1"}),
    StylizeCase("weights_negative", 422, png(), _style() * 2, fields={"style_weights": "1,-1"}),
    StylizeCase("masks_wrong_count", 422, png(), _style() * 2, masks=(png(),)),
    StylizeCase("png_bad_ihdr_crc", 400, png_with_bad_ihdr_crc(), _style(), code="corrupt_image"),
    StylizeCase(
        "too_elongated",
        400,
        elongated(),
        _style(),
        fields={"size": "64"},
        code="aspect_ratio_too_large",
    ),
    StylizeCase(
        "weights_100k_commas",
        422,
        png(),
        _style() * 2,
        fields={"style_weights": "," * 100_000},
        code="validation_error",
    ),
    StylizeCase("alpha_nan", 422, png(), _style(), fields={"alpha": "nan"}),
)


@dataclass(frozen=True)
class GenerateCase:
    """One request to ``POST /v1/generate`` and its documented status."""

    name: str
    status: int
    body: dict | str
    message: str | None = None  # a phrase the error message must contain


GENERATE_CASES: tuple[GenerateCase, ...] = (
    GenerateCase("no_prompt", 422, {"num_images": 1}),
    GenerateCase("empty_prompt", 422, {"prompt": ""}),
    GenerateCase("prompt_not_text", 422, {"prompt": ["a", "list"]}),
    GenerateCase("too_many_images", 422, {"prompt": "a cat", "num_images": 9}),
    GenerateCase("zero_images", 422, {"prompt": "a cat", "num_images": 0}),
    GenerateCase("steps_not_int", 422, {"prompt": "a cat", "steps": "many"}),
    GenerateCase("steps_zero", 422, {"prompt": "a cat", "steps": 0}),
    GenerateCase("negative_guidance", 422, {"prompt": "a cat", "guidance_scale": -1}),
    GenerateCase("unknown_sampler", 422, {"prompt": "a cat", "sampler": "magic"}),
    GenerateCase("negative_seed", 422, {"prompt": "a cat", "seed": -5}),
    GenerateCase("unknown_field", 422, {"prompt": "a cat", "colour": "red"}),
    GenerateCase("not_json", 422, "{this is not json"),
    GenerateCase("whitespace_prompt", 422, {"prompt": " \t\n "}, "only whitespace"),
    GenerateCase(
        "nan_guidance", 422, '{"prompt": "a cat", "guidance_scale": NaN}', "finite number"
    ),
    GenerateCase(
        "infinite_guidance", 422, '{"prompt": "a cat", "guidance_scale": Infinity}', "finite"
    ),
)

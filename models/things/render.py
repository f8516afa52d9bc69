"""Sprites of things and the colour-variant hue shift.

**Emoji sprites.** Noto Color Emoji is a bitmap (CBDT) font with one strike at 109 px:
Pillow draws an emoji with ``ImageFont.truetype(path, 109)`` and
``draw.text(..., embedded_color=True)``. The drawing is cropped to its alpha bounding
box and resized (Lanczos, in premultiplied alpha) so that its longer side is
:data:`SPRITE_SIZE`; scenes resize that sprite again to the object's size. Sprites are
cached per process (all ~1,300 take about 3 s to draw once).

**Shape sprites.** Circle, square and triangle are drawn procedurally with the
inequalities of :mod:`models.shapes.render` at :data:`SPRITE_SIZE`, in a flat colour.

**Colour variants.** A sprite is recoloured so that its dominant hue is a named hue
``h_t`` of :data:`THING_HUES`, keeping each pixel's saturation and value. In HSV
(``h`` in degrees), at the size the object is drawn:

- the *dominant hue* ``h*`` is the centre of the fullest of 36 hue bins of 10 degrees
  over the opaque (alpha >= 0.5), coloured (``s >= 0.25``, ``v >= 0.2``) pixels, each
  pixel weighted by ``s * v`` (circular: bin 35 borders bin 0);
- every pixel's hue becomes ``(h - h* + h_t) mod 360``; ``h*`` and ``h_t`` are bin
  centres, so the fullest bin moves onto ``h_t``'s bin whole and the colour variant's
  dominant hue is ``h_t`` to within a bin (``h*`` is measured once per thing on a 32 px
  reduction of its sprite, so resampling can move the peak by a bin at most);
- a sprite with fewer than :data:`MIN_COLOURED_SHARE` of its opaque pixels coloured
  (grey, black, white things) has no dominant hue; a thing has colour variants only
  when its hue is clearly dominant (:data:`COLOURABLE_SHARE`, :data:`DOMINANCE`), so
  that resampling cannot hand the peak to a rival hue.
"""

from __future__ import annotations

import os
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from models.shapes.vocab import PALETTE
from models.things.vocab import Thing

FONT_ENV = "ATELIER_EMOJI_FONT"
DEFAULT_FONT_PATH = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")
#: The font's one bitmap strike.
STRIKE_SIZE = 109
#: Longer side of a cached sprite, in pixels (objects are at most 56 px on a 64 px canvas;
#: objects of at most a third of it are resampled from a half-size copy).
SPRITE_SIZE = 80
#: Target hue (degrees) of each colour a thing can be recoloured to: bin centres of the
#: 10-degree histogram below, so a shifted peak bin lands in one bin whole.
THING_HUES: dict[str, float] = {
    "red": 5.0,
    "orange": 35.0,
    "yellow": 55.0,
    "green": 120.0,
    "cyan": 185.0,
    "blue": 225.0,
    "purple": 275.0,
    "pink": 325.0,
}
THING_COLOURS: tuple[str, ...] = tuple(THING_HUES)
HUE_BINS = 36
MIN_COLOURED_SHARE = 0.3
#: A thing has colour variants when at least this share of its opaque pixels is coloured
#: and its peak bin outweighs every bin 3 or more bins away by :data:`DOMINANCE`.
COLOURABLE_SHARE = 0.4
DOMINANCE = 2.0
_MIN_S, _MIN_V, _MIN_ALPHA = 0.25, 0.2, 0.5


class FontMissingError(FileNotFoundError):
    """The emoji font is not where the settings say."""


def font_path() -> Path:
    """The emoji font: ``$ATELIER_EMOJI_FONT`` if set, else Debian's path.

    Raises:
        FontMissingError: when the file does not exist, saying how to install it.
    """
    path = Path(os.environ.get(FONT_ENV) or DEFAULT_FONT_PATH)
    if not path.is_file():
        raise FontMissingError(
            f"the Noto Color Emoji font is missing at {path}: install the Debian package "
            "fonts-noto-color-emoji (`make fonts`, or `apt-get install fonts-noto-color-emoji`), "
            f"or point {FONT_ENV} at a NotoColorEmoji.ttf"
        )
    return path


@lru_cache(maxsize=4)
def _font(path: str) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(path, STRIKE_SIZE)


def _fit(image: Image.Image, side: int) -> Image.Image:
    """Resize so the longer side is ``side`` (premultiplied RGBa in, RGBa out)."""
    w, h = image.size
    scale = side / max(w, h)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return image.resize(size, Image.Resampling.LANCZOS)


def emoji_glyph(text: str) -> Image.Image:
    """``text`` drawn in colour at the strike size, cropped to its alpha box (``RGBA``).

    Raises:
        FontMissingError: without the font.
        ValueError: when the font draws nothing for ``text``.
    """
    font = _font(str(font_path()))
    canvas = Image.new("RGBA", (STRIKE_SIZE * 3, STRIKE_SIZE * 2), (0, 0, 0, 0))
    ImageDraw.Draw(canvas).text((4, 4), text, font=font, embedded_color=True)
    box = canvas.getchannel("A").getbbox()
    if box is None:
        raise ValueError(f"the emoji font draws nothing for {text!r}")
    return canvas.crop(box)


@cache
def emoji_sprite(text: str) -> Image.Image:
    """:func:`emoji_glyph` as a premultiplied ``"RGBa"`` image, longer side ``SPRITE_SIZE``."""
    return _fit(emoji_glyph(text).convert("RGBa"), SPRITE_SIZE)


def shape_mask(shape: str, side: int) -> np.ndarray:
    """Boolean ``(side, side)`` mask of a circle, square or triangle filling the square."""
    coords = np.arange(side, dtype=np.float64) + 0.5
    x, y = coords[None, :] - side / 2, coords[:, None] - side / 2
    r = side / 2
    if shape == "circle":
        return np.asarray(x**2 + y**2 <= r**2)
    if shape == "square":
        return np.asarray((np.abs(x) <= r) & (np.abs(y) <= r))
    if shape == "triangle":
        return np.asarray((np.abs(y) <= r) & (np.abs(x) <= (y + r) / 2))
    raise ValueError(f"unknown shape {shape!r}; expected circle, square or triangle")


@lru_cache(maxsize=64)
def shape_sprite(shape: str, rgb: tuple[int, int, int]) -> Image.Image:
    """A flat ``rgb`` shape as a premultiplied ``"RGBa"`` sprite of ``SPRITE_SIZE``."""
    mask = shape_mask(shape, SPRITE_SIZE)
    pixels = np.zeros((SPRITE_SIZE, SPRITE_SIZE, 4), dtype=np.uint8)
    pixels[mask] = (*rgb, 255)
    return Image.fromarray(pixels, "RGBa")


def rgb_to_hsv(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``float (..., 3)`` in ``[0, 1]`` -> hue in degrees ``[0, 360)``, saturation, value."""
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    v = rgb.max(axis=-1)
    c = v - rgb.min(axis=-1)
    s = np.where(v > 0, c / np.maximum(v, 1e-12), 0.0)
    safe = np.maximum(c, 1e-12)
    h = np.where(
        v == r, ((g - b) / safe) % 6.0, np.where(v == g, (b - r) / safe + 2.0, (r - g) / safe + 4.0)
    )
    h = np.where(c > 0, h * 60.0, 0.0)
    return h % 360.0, s, v


def hsv_to_rgb(h: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Inverse of :func:`rgb_to_hsv`: ``float (..., 3)`` in ``[0, 1]``."""

    def channel(n: float) -> np.ndarray:
        k = (n + h / 60.0) % 6.0
        return np.asarray(v - v * s * np.clip(np.minimum(k, 4.0 - k), 0.0, 1.0))

    return np.stack([channel(5.0), channel(3.0), channel(1.0)], axis=-1)


def _straight(sprite: Image.Image) -> tuple[np.ndarray, np.ndarray]:
    """Premultiplied ``RGBa`` sprite -> straight RGB and alpha, float32 in ``[0, 1]``."""
    pixels = np.asarray(sprite.convert("RGBA"), dtype=np.float32) / np.float32(255.0)
    return pixels[..., :3], pixels[..., 3]


def dominant_hue(rgb: np.ndarray, alpha: np.ndarray) -> float | None:
    """The dominant hue (degrees) of the opaque coloured pixels, ``None`` if too few.

    Args:
        rgb: straight colour, float ``(H, W, 3)`` in ``[0, 1]``.
        alpha: coverage, float ``(H, W)`` in ``[0, 1]``.
    """
    h, s, v = rgb_to_hsv(rgb)
    opaque = alpha >= _MIN_ALPHA
    coloured = opaque & (s >= _MIN_S) & (v >= _MIN_V)
    if opaque.sum() == 0 or coloured.sum() < MIN_COLOURED_SHARE * opaque.sum():
        return None
    bins = (h[coloured] / (360.0 / HUE_BINS)).astype(np.int64) % HUE_BINS
    weights = np.bincount(bins, weights=(s * v)[coloured], minlength=HUE_BINS)
    return (float(np.argmax(weights)) + 0.5) * 360.0 / HUE_BINS


def shift_hue(rgb: np.ndarray, degrees: float) -> np.ndarray:
    """Rotate every pixel's hue by ``degrees``, keeping saturation and value."""
    h, s, v = rgb_to_hsv(rgb)
    return hsv_to_rgb((h + degrees) % 360.0, s, v).astype(rgb.dtype)


@cache
def base_sprite(thing: Thing) -> Image.Image:
    """The cached ``SPRITE_SIZE`` sprite of ``thing`` in its own colours (shapes: white)."""
    if thing.emoji is None:
        return shape_sprite(thing.key, PALETTE["white"])
    return emoji_sprite(thing.emoji)


@cache
def source_hue(thing: Thing) -> float | None:
    """The dominant hue of ``thing``'s own colours (on a 32 px reduction), ``None`` for
    shapes and for things too grey to have one."""
    if thing.emoji is None:
        return None
    rgb, alpha = _straight(_fit(base_sprite(thing), 32))
    h, s, v = rgb_to_hsv(rgb)
    opaque = alpha >= _MIN_ALPHA
    coloured = opaque & (s >= _MIN_S) & (v >= _MIN_V)
    if coloured.sum() < COLOURABLE_SHARE * max(1, opaque.sum()):
        return None
    bins = (h[coloured] / (360.0 / HUE_BINS)).astype(np.int64) % HUE_BINS
    weights = np.bincount(bins, weights=(s * v)[coloured], minlength=HUE_BINS)
    peak = int(np.argmax(weights))
    distance = np.abs((np.arange(HUE_BINS) - peak + HUE_BINS // 2) % HUE_BINS - HUE_BINS // 2)
    rival = weights[distance >= 3].max(initial=0.0)
    if weights[peak] < DOMINANCE * rival:
        return None
    return (peak + 0.5) * 360.0 / HUE_BINS


def colourable(thing: Thing) -> bool:
    """Whether ``thing`` has colour variants: an emoji with a dominant hue."""
    return source_hue(thing) is not None


@cache
def _half_sprite(thing: Thing) -> Image.Image:
    """The sprite at half size (a mip level: small objects resample fewer pixels)."""
    return _fit(base_sprite(thing), SPRITE_SIZE // 2)


@lru_cache(maxsize=32768)
def _resized(thing: Thing, side: int) -> np.ndarray:
    """Straight RGBA bytes of ``thing`` at ``side`` (cached as bytes: ~4 KB an entry)."""
    source = _half_sprite(thing) if side <= SPRITE_SIZE // 3 else base_sprite(thing)
    pixels = np.asarray(_fit(source, side).convert("RGBA"))
    pixels.flags.writeable = False
    return pixels


def sprite_pixels(
    thing: Thing, side: int, colour: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``thing`` at ``side`` px (its longer side), recoloured to ``colour`` when given.

    A shape takes the flat colour ``PALETTE[colour]`` of the shapes world (white when
    ``None``); an emoji's hue is rotated by ``THING_HUES[colour] - source_hue(thing)``.

    Returns:
        ``(rgb, alpha)``: straight colour float32 ``(h, w, 3)`` and coverage ``(h, w)``,
        both in ``[0, 1]``, with ``max(h, w) == side``.

    Raises:
        ValueError: for an unknown colour, or a colour for a thing with no dominant hue.
    """
    if side < 1:
        raise ValueError(f"side must be >= 1, got {side}")
    return _coloured(thing, side, colour)


@lru_cache(maxsize=4096)
def _coloured(thing: Thing, side: int, colour: str | None) -> tuple[np.ndarray, np.ndarray]:
    pixels = _resized(thing, side).astype(np.float32) / np.float32(255.0)
    rgb, alpha = pixels[..., :3], pixels[..., 3]
    if colour is None:
        return rgb, alpha
    if thing.emoji is None:
        if colour not in PALETTE:
            raise ValueError(f"unknown shape colour {colour!r}; expected one of {tuple(PALETTE)}")
        flat = np.broadcast_to(np.asarray(PALETTE[colour], np.float32) / 255.0, rgb.shape)
        return flat, alpha
    if colour not in THING_HUES:
        raise ValueError(f"unknown colour {colour!r}; expected one of {THING_COLOURS}")
    hue = source_hue(thing)
    if hue is None:
        raise ValueError(f"{thing.name!r} has no dominant hue: it has no colour variants")
    return shift_hue(rgb, THING_HUES[colour] - hue), alpha

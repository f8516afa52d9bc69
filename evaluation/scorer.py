"""An automatic scorer for captioned-shapes images, in the spirit of GenEval.

1. Segment: a pixel ``p`` in ``[0, 1]^3`` is foreground when its brightness
   ``max(p) >= MIN_BRIGHTNESS`` (0.5: an edge pixel half covered by a shape, as a blurred
   or soft generated edge gives, still counts, so sizes survive blur); its colour is the
   palette colour nearest (Euclidean) to its chromaticity ``p / max(p)`` (every palette
   colour has a channel at 1), unless that distance exceeds ``MAX_DISTANCE``.
2. Find objects: 8-connected components per colour (``scipy.ndimage.label``) of at least
   ``min_area`` pixels, holes filled.
3. Describe each object from its mask and bounding box (height ``h``, width ``w``):

   - shape: with ``skew`` the skewness (third standardised moment) of the mask's pixel
     rows and ``fill = area / (h * w)``: triangle (apex up: its mass sits low, with a
     long tail up to the apex) when ``skew < -0.3``; else square when ``fill >= 0.95`` or
     (``fill >= 0.85`` and >= 3 of the box's corner pixels are set); else circle.
     (Renders: circles fill 0.67-0.92 with <= 1 corner, squares 1.0 with 4; triangles
     have ``skew`` from -0.74 to -0.49, circles and squares ``|skew| <= 0.15``.) The
     skewness weighs every pixel, so one edge pixel lost or gained to noise moves it
     little; the earlier rule, the mass below against above the box's middle, flipped
     when noise took a small triangle's apex or added a pixel to a small circle's top.
   - size: large when ``max(h, w) >= 7`` (renders: small 4-6 px, large 8-9 px).
   - grid cell: the cell holding the centroid.

4. Check each constraint of the caption, and that nothing else is drawn (see
   :func:`score_parsed`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch
from scipy import ndimage

from models.shapes.captions import ParsedCaption, parse_caption
from models.shapes.vocab import CELL, COLOURS, GRID, IMAGE_SIZE, PALETTE, POSITIONS, SHAPES

_PALETTE = np.array([PALETTE[c] for c in COLOURS], dtype=np.float64) / 255.0
_BACKGROUND = len(COLOURS)
_EIGHT_CONNECTED = np.ones((3, 3), dtype=bool)

#: Thresholds (documented in the module docstring).
MIN_BRIGHTNESS = 0.5
MAX_DISTANCE = 0.3
MIN_AREA = 6
TRIANGLE_SKEW = -0.3
SQUARE_FILL = 0.95
SQUARE_FILL_WITH_CORNERS = 0.85
LARGE_EXTENT = 7
#: A relation needs the centroids this many pixels apart along its axis.
RELATION_MARGIN = 3.0


@dataclass(frozen=True)
class DetectedObject:
    """One object found in an image.

    Args:
        colour, shape, size: classified attributes.
        cell: grid cell index ``row * 3 + col`` of the centroid.
        centroid: ``(x, y)`` in pixels (pixel ``(i, j)`` has centre ``(j + 0.5, i + 0.5)``).
        area: pixel count.
    """

    colour: str
    shape: str
    size: str
    cell: int
    centroid: tuple[float, float]
    area: int

    @property
    def position(self) -> str:
        return POSITIONS[self.cell]


@dataclass(frozen=True)
class ScoreResult:
    """Whether an image satisfies its caption, overall and per category.

    A category is ``None`` when the caption states no constraint of that kind. ``exact``
    (never ``None``) says the image holds exactly the objects the caption names, no more:
    the generator draws nothing else, so stray blobs are errors. ``ok`` is true when every
    stated category and ``exact`` hold *and* one set of objects satisfies all the
    attributes of each phrase at once (so "a small red circle in the top left" is not met
    by a large red circle there and a small one elsewhere).
    """

    ok: bool
    colour: bool | None
    shape: bool | None
    count: bool | None
    size: bool | None
    position: bool | None
    relation: bool | None
    exact: bool
    objects: tuple[DetectedObject, ...] = ()

    @property
    def categories(self) -> dict[str, bool | None]:
        """``{category: verdict}``: the five GenEval-like categories, size and exact."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("ok", "objects")
        }


def as_hwc_float(image: np.ndarray | torch.Tensor) -> np.ndarray:
    """Bring an image to ``float64 (32, 32, 3)`` in ``[0, 1]``.

    Accepts ``uint8`` (0..255) or float (``[0, 1]``, clipped) arrays or tensors, laid out
    ``(3, 32, 32)`` or ``(32, 32, 3)``.
    """
    if isinstance(image, torch.Tensor):
        image = image.detach().to(
            "cpu", torch.float32 if image.is_floating_point() else image.dtype
        )
        image = image.numpy()
    array = np.asarray(image)
    if array.ndim == 3 and array.shape[0] == 3 and array.shape[-1] != 3:
        array = array.transpose(1, 2, 0)
    if array.shape != (IMAGE_SIZE, IMAGE_SIZE, 3):
        raise ValueError(
            f"expected an image of shape (3, {IMAGE_SIZE}, {IMAGE_SIZE}) or "
            f"({IMAGE_SIZE}, {IMAGE_SIZE}, 3), got {tuple(array.shape)}"
        )
    if array.dtype == np.uint8:
        return array.astype(np.float64) / 255.0
    if not np.issubdtype(array.dtype, np.floating):
        raise ValueError(f"expected uint8 or float pixels, got {array.dtype}")
    return np.clip(array.astype(np.float64), 0.0, 1.0)


def segment(image: np.ndarray | torch.Tensor) -> np.ndarray:
    """Per-pixel colour label: index into :data:`COLOURS`, or ``len(COLOURS)`` for background.

    Shape:
        image ``(3, 32, 32)`` or ``(32, 32, 3)`` -> labels ``int (32, 32)``.
    """
    pixels = as_hwc_float(image)
    brightness = pixels.max(axis=-1)
    chroma = pixels / np.maximum(brightness, 1e-6)[..., None]
    distance = np.linalg.norm(chroma[:, :, None, :] - _PALETTE[None, None], axis=-1)
    labels = distance.argmin(axis=-1)
    labels[(brightness < MIN_BRIGHTNESS) | (distance.min(axis=-1) > MAX_DISTANCE)] = _BACKGROUND
    return labels


def row_skewness(rows: np.ndarray) -> float:
    """Skewness ``E[(r - mean)^3] / E[(r - mean)^2]^(3/2)`` of pixel row indices (0 for a
    single row)."""
    deviation = rows - rows.mean()
    variance = float(np.mean(deviation**2))
    if variance == 0.0:
        return 0.0
    return float(np.mean(deviation**3)) / variance**1.5


def classify_shape(mask: np.ndarray) -> str:
    """``"circle"``, ``"square"`` or ``"triangle"`` for a non-empty boolean mask."""
    rows, cols = np.nonzero(mask)
    top, bottom, left, right = rows.min(), rows.max(), cols.min(), cols.max()
    area = rows.size
    if row_skewness(rows) < TRIANGLE_SKEW:
        return "triangle"
    fill = area / ((bottom - top + 1) * (right - left + 1))
    corners = sum(int(mask[r, c]) for r in (top, bottom) for c in (left, right))
    if fill >= SQUARE_FILL or (fill >= SQUARE_FILL_WITH_CORNERS and corners >= 3):
        return "square"
    return "circle"


def _describe(mask: np.ndarray, colour: str) -> DetectedObject:
    rows, cols = np.nonzero(mask)
    extent = max(rows.max() - rows.min() + 1, cols.max() - cols.min() + 1)
    x, y = cols.mean() + 0.5, rows.mean() + 0.5
    col = min(int(x // CELL), GRID - 1)
    row = min(int(y // CELL), GRID - 1)
    return DetectedObject(
        colour=colour,
        shape=classify_shape(mask),
        size="large" if extent >= LARGE_EXTENT else "small",
        cell=row * GRID + col,
        centroid=(float(x), float(y)),
        area=int(rows.size),
    )


def detect_objects(image: np.ndarray | torch.Tensor) -> list[DetectedObject]:
    """Every object in ``image``, in (colour, reading) order."""
    labels = segment(image)
    found = []
    for index, colour in enumerate(COLOURS):
        components, n = ndimage.label(labels == index, structure=_EIGHT_CONNECTED)
        for k in range(1, n + 1):
            mask = ndimage.binary_fill_holes(components == k)
            if mask.sum() >= MIN_AREA:
                found.append(_describe(mask, colour))
    return found


def relation_holds(relation: str, a: DetectedObject, b: DetectedObject) -> bool:
    """Whether ``a`` is ``relation`` ``b``, comparing centroids with a margin."""
    (ax, ay), (bx, by) = a.centroid, b.centroid
    gap = {"left of": bx - ax, "right of": ax - bx, "above": by - ay, "below": ay - by}[relation]
    return gap >= RELATION_MARGIN


def _all_or_none(checks: list[bool]) -> bool | None:
    return all(checks) if checks else None


def score_parsed(objects: list[DetectedObject], parsed: ParsedCaption) -> ScoreResult:
    """Check the detected ``objects`` against the constraints in ``parsed``.

    Per category (each phrase names ``count`` objects of a colour-shape pair):

    - colour: for every colour, at least as many objects of it as the phrases name.
    - shape: for every phrase, at least ``count`` objects of its colour and shape.
    - count: for every numbered phrase ("two", "three"), exactly ``count`` of them.
    - size / position: a stated size / grid position is met by enough of those objects.
    - relation: some object of the first phrase is left of / right of / above / below some
      object of the second (centroids at least ``RELATION_MARGIN`` px apart on that axis).
    - exact: the objects are exactly those named (``count`` of each phrase, nothing else).

    Raises:
        ValueError: when a phrase names something other than a coloured shape of the
            shapes world (the caption grammar is open; this scorer is not).
    """
    for spec in parsed.objects:
        if spec.colour is None or spec.thing not in SHAPES:
            raise ValueError(f"the shapes scorer checks coloured shapes, not {spec.pair}")
    needed: dict[str, int] = {}
    for spec in parsed.objects:
        needed[spec.colour] = needed.get(spec.colour, 0) + spec.count
    colour = all(sum(o.colour == c for o in objects) >= n for c, n in needed.items())

    matches = [[o for o in objects if (o.colour, o.shape) == spec.pair] for spec in parsed.objects]
    shape = all(len(m) >= spec.count for m, spec in zip(matches, parsed.objects, strict=True))
    count = _all_or_none(
        [
            len(m) == spec.count
            for m, spec in zip(matches, parsed.objects, strict=True)
            if spec.counted
        ]
    )
    size = _all_or_none(
        [
            sum(o.size == spec.size for o in m) >= spec.count
            for m, spec in zip(matches, parsed.objects, strict=True)
            if spec.size is not None
        ]
    )
    position = _all_or_none(
        [
            any(o.position == spec.position for o in m)
            for m, spec in zip(matches, parsed.objects, strict=True)
            if spec.position is not None
        ]
    )
    full = [
        [o for o in m if spec.size in (None, o.size) and spec.position in (None, o.position)]
        for m, spec in zip(matches, parsed.objects, strict=True)
    ]
    relation = None
    joint = all(len(f) >= spec.count for f, spec in zip(full, parsed.objects, strict=True))
    if parsed.relation is not None:
        relation = any(
            relation_holds(parsed.relation, a, b) for a in matches[0] for b in matches[1]
        )
        joint = joint and any(
            relation_holds(parsed.relation, a, b) for a in full[0] for b in full[1]
        )
    exact = len(objects) == sum(spec.count for spec in parsed.objects) and all(
        len(m) == spec.count for m, spec in zip(matches, parsed.objects, strict=True)
    )
    verdicts = (colour, shape, count, size, position, relation, exact)
    ok = joint and all(v for v in verdicts if v is not None)
    return ScoreResult(ok, *verdicts, objects=tuple(objects))


def score_image(image: np.ndarray | torch.Tensor, caption: str) -> ScoreResult:
    """Score one image against its caption.

    Args:
        image: ``float (3, 32, 32)`` in ``[0, 1]`` (tensor or array) or ``uint8 (32, 32, 3)``.
        caption: a caption in the grammar of :mod:`models.shapes.captions`.

    Returns:
        :class:`ScoreResult` with ``ok`` and per-category verdicts.

    Raises:
        ValueError: for a caption outside the grammar or an image of the wrong shape.
    """
    parsed = parse_caption(caption)
    return score_parsed(detect_objects(image), parsed)

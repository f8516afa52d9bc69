"""Things scenes: what to draw where, sampled with its caption, and drawn at 64 x 64.

**Layout.** The canvas is 64 x 64 px, cut into the shapes world's 3 x 3 grid (cells of
21.3 px, index ``row * 3 + col``). A one-object caption with no place draws the thing
*centred*, its longer side ``side`` px (even sizes; small: 20-30, large: 40-56,
unstated: 20-56),
moved by up to 4 px on each axis. Every other object sits *in a grid cell* (a stated
place, a relation, several objects, counts), ``side`` small: 11-14, large: 17-20, its
centre jittered so that it never leaves its cell. Objects are in distinct cells, so a
cell index is unambiguous; a relation "A to the left of B" puts A in a cell of a
strictly smaller column than B's ("above": smaller row), as in :mod:`models.shapes.scenes`.

**Families** (of a things scene): one object 65 %, several distinct things 12 %, counts
10 % ("two cats", "three apples and a dog"), a relation 13 %. At most 4 objects.

**Backgrounds** (:data:`BACKGROUNDS`, never named in the caption): light 50 % (white,
cream, pale tints), dark 25 % (black, charcoal, navy), plain mid colours 25 %.

**Colour variants.** A colourable thing (:func:`~models.things.render.colourable`) is
drawn hue-shifted to a named colour with probability 0.25 in one-object captions and
0.15 per phrase otherwise; the caption then uses a phrasing with no colour word.

**Shapes scenes.** With probability ``shapes_share`` a scene is the shapes world's
(:func:`models.shapes.sample_scene` with the same split): its caption, its black canvas
and flat palette colours, drawn at 32 px by :func:`models.shapes.render` and upscaled
2x by pixel repetition, so a prompt about shapes keeps meaning what it meant.

**Splits.** ``"train"`` uses training phrasings and colour pairs only. In ``"heldout"``
every caption's first object is held out: a held-out paraphrase of a thing (half the
time) or a held-out ``(thing, colour)`` pair; shapes scenes are the shapes world's
held-out captions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, lru_cache

import numpy as np

from models.shapes import render as render_shapes
from models.shapes import sample_scene as sample_shapes_scene
from models.shapes.captions import RELATIONS
from models.shapes.vocab import CELL as SHAPES_CELL
from models.shapes.vocab import POSITIONS, RADIUS, SIZES
from models.things.captions import FRAMES, ThingCaption, ThingSpec, compose_caption
from models.things.render import THING_COLOURS, colourable, sprite_pixels
from models.things.splits import (
    check_split,
    colour_free,
    colour_heldout,
    heldout_phrasings,
    heldout_things,
    training_phrasings,
)
from models.things.vocab import Thing, thing, things

CANVAS = 64
GRID = 3
CELL = CANVAS / GRID
#: Longer side (px) of a centred one-object scene, per size word (``None``: unstated).
CENTRED_SIDE: dict[str | None, tuple[int, int]] = {
    "small": (20, 30),
    "large": (40, 56),
    None: (20, 56),
}
CENTRED_JITTER = 4.0
#: Longer side (px) of an object in a grid cell, per size word.
CELL_SIDE: dict[str, tuple[int, int]] = {"small": (11, 14), "large": (17, 20)}
FAMILIES: dict[str, float] = {"single": 0.65, "several": 0.12, "count": 0.10, "relation": 0.13}
#: Background name -> (RGB, group).
BACKGROUNDS: dict[str, tuple[tuple[int, int, int], str]] = {
    "white": ((255, 255, 255), "light"),
    "cream": ((250, 243, 224), "light"),
    "pale blue": ((220, 234, 247), "light"),
    "pale pink": ((250, 225, 230), "light"),
    "pale green": ((225, 243, 225), "light"),
    "pale yellow": ((252, 248, 210), "light"),
    "light grey": ((225, 225, 225), "light"),
    "black": ((0, 0, 0), "dark"),
    "charcoal": ((45, 45, 48), "dark"),
    "navy": ((20, 28, 60), "dark"),
    "sky blue": ((135, 190, 230), "plain"),
    "sand": ((214, 190, 150), "plain"),
    "sage": ((160, 185, 150), "plain"),
    "lavender": ((185, 170, 220), "plain"),
    "slate": ((110, 125, 140), "plain"),
}
BACKGROUND_GROUPS: dict[str, float] = {"light": 0.5, "dark": 0.25, "plain": 0.25}
SINGLE_COLOUR_P = 0.25
MULTI_COLOUR_P = 0.15
SHAPES_SHARE = 0.1


@dataclass(frozen=True)
class PlacedThing:
    """One drawn object.

    Args:
        thing: the thing's key.
        colour: the colour it is drawn in (a thing colour for a hue-shifted emoji, a
            shapes palette colour for a shape), ``None`` for its own colours.
        side: its longer side in pixels.
        centre: ``(x, y)`` of its box centre in pixels.
        cell: its grid cell ``row * 3 + col``, ``None`` when drawn centred.
    """

    thing: str
    colour: str | None
    side: int
    centre: tuple[float, float]
    cell: int | None


@dataclass(frozen=True)
class ThingScene:
    """A scene's labels: the objects, the caption, the background and the world.

    ``kind`` is ``"things"`` or ``"shapes"``; ``parsed`` is the caption's constraints
    (:class:`~models.things.captions.ThingCaption` for things, the shapes world's
    ``ParsedCaption`` for shapes).
    """

    objects: tuple[PlacedThing, ...]
    caption: str
    background: str
    kind: str
    parsed: object = field(compare=False)


def _pick(rng: np.random.Generator, options: tuple[str, ...] | list[str]) -> str:
    return str(options[int(rng.integers(len(options)))])


def _weighted(rng: np.random.Generator, weights: dict[str, float]) -> str:
    """A key of ``weights`` drawn with probability proportional to its value."""
    u = rng.random() * sum(weights.values())
    for name, weight in weights.items():
        u -= weight
        if u < 0:
            return name
    return name


@cache
def _backgrounds_of(group: str) -> tuple[str, ...]:
    return tuple(name for name, (_, g) in BACKGROUNDS.items() if g == group)


@cache
def _background_fill(name: str) -> np.ndarray:
    rgb, _ = BACKGROUNDS[name]
    fill = np.empty((CANVAS, CANVAS, 3), dtype=np.float32)
    fill[:] = np.asarray(rgb, np.float32) / 255.0
    return fill


@lru_cache(maxsize=1)
def _emoji_things() -> tuple[Thing, ...]:
    return tuple(t for t in things() if not t.is_shape)


@lru_cache(maxsize=2)
def _colour_pairs(heldout: bool) -> tuple[tuple[str, str], ...]:
    """Colourable ``(key, colour)`` pairs that are held out (or not) and have a phrasing."""
    return tuple(
        (t.key, c)
        for t in _emoji_things()
        if colourable(t) and colour_free(training_phrasings(t))
        for c in THING_COLOURS
        if colour_heldout(t.key, c) == heldout
    )


def _noun(rng: np.random.Generator, item: Thing, *, coloured: bool) -> str:
    """A training phrasing: the name 60 % of the time, else an alias."""
    options = training_phrasings(item)
    if coloured:
        options = colour_free(options)
    if len(options) == 1 or rng.random() < 0.6:
        return options[0]
    return _pick(rng, options[1:])


def _train_spec(
    rng: np.random.Generator, colour_p: float, exclude: set[str], pool: tuple[Thing, ...]
) -> ThingSpec:
    """A thing of ``pool`` (not in ``exclude``) with a training phrasing, maybe a training
    colour."""
    while True:
        item = pool[int(rng.integers(len(pool)))]
        if item.key not in exclude:
            break
    colour = None
    if rng.random() < colour_p and colourable(item) and colour_free(training_phrasings(item)):
        allowed = [c for c in THING_COLOURS if not colour_heldout(item.key, c)]
        colour = _pick(rng, allowed) if allowed else None
    return ThingSpec(item.key, _noun(rng, item, coloured=colour is not None), colour=colour)


def _heldout_spec(rng: np.random.Generator, pool: tuple[Thing, ...]) -> ThingSpec:
    """A thing of ``pool`` with a held-out paraphrase, or in a held-out colour."""
    keys = {item.key for item in pool}
    paraphrased = [key for key in heldout_things() if key in keys]
    pairs = [pair for pair in _colour_pairs(True) if pair[0] in keys]
    if not paraphrased and not pairs:
        raise ValueError("these things have no held-out paraphrase or colour: no held-out split")
    if paraphrased and (rng.random() < 0.5 or not pairs):
        key = _pick(rng, paraphrased)
        return ThingSpec(key, _pick(rng, heldout_phrasings(thing(key))))
    key, colour = pairs[int(rng.integers(len(pairs)))]
    return ThingSpec(key, _noun(rng, thing(key), coloured=True), colour=colour)


def _specs(
    rng: np.random.Generator, split: str, k: int, colour_p: float, pool: tuple[Thing, ...]
) -> list[ThingSpec]:
    specs: list[ThingSpec] = []
    if split == "heldout":
        specs.append(_heldout_spec(rng, pool))
    while len(specs) < k:
        specs.append(_train_spec(rng, colour_p, {s.thing for s in specs}, pool))
    return specs


def subset_pool(count: int | None) -> tuple[Thing, ...]:
    """The emoji things a scene draws from: all of them, or ``count`` spread evenly over
    the vocabulary's order (faces, people, animals, food, travel, objects, symbols), so a
    small CPU-sized run still sees every kind of thing."""
    pool = _emoji_things()
    if count is None:
        return pool
    if not 3 <= count <= len(pool):
        raise ValueError(f"a subset holds 3 to {len(pool)} things, got {count}")
    return tuple(pool[(i * len(pool)) // count] for i in range(count))


def _with(spec: ThingSpec, **changes: object) -> ThingSpec:
    values = {
        "thing": spec.thing,
        "noun": spec.noun,
        "count": spec.count,
        "size": spec.size,
        "colour": spec.colour,
        "position": spec.position,
    }
    values.update(changes)
    return ThingSpec(**values)  # type: ignore[arg-type]


def _maybe(rng: np.random.Generator, p: float, values: tuple[str, ...]) -> str | None:
    return _pick(rng, values) if rng.random() < p else None


def sample_caption(
    rng: np.random.Generator,
    split: str = "train",
    *,
    family: str | None = None,
    pool: tuple[Thing, ...] | None = None,
) -> ThingCaption:
    """Draw a family (or take ``family``) and fill it with things of ``split`` drawn from
    ``pool`` (:func:`subset_pool`; default every emoji thing)."""
    pool = pool or _emoji_things()
    check_split(split)
    if family is None:
        family = _weighted(rng, FAMILIES)
    elif family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {tuple(FAMILIES)}")
    if family == "single":
        (spec,) = _specs(rng, split, 1, SINGLE_COLOUR_P, pool)
        spec = _with(spec, size=_maybe(rng, 0.4, SIZES), position=_maybe(rng, 0.25, POSITIONS))
        return ThingCaption((spec,), frame=_pick(rng, FRAMES) if rng.random() < 0.4 else "{}")
    if family == "several":
        k = 2 if rng.random() < 0.6 else 3
        specs = _specs(rng, split, k, MULTI_COLOUR_P, pool)
        return ThingCaption(tuple(_with(s, size=_maybe(rng, 0.3, SIZES)) for s in specs))
    if family == "count":
        number = 2 if rng.random() < 0.5 else 3
        extra = rng.random() < 0.5
        specs = _specs(rng, split, 2 if extra else 1, MULTI_COLOUR_P, pool)
        counted = [_with(specs[0], count=number, size=_maybe(rng, 0.25, SIZES))]
        if extra:
            counted.append(_with(specs[1], size=_maybe(rng, 0.3, SIZES)))
        return ThingCaption(tuple(counted))
    specs = _specs(rng, split, 2, MULTI_COLOUR_P, pool)
    relation = _pick(rng, RELATIONS)
    return ThingCaption(tuple(_with(s, size=_maybe(rng, 0.3, SIZES)) for s in specs), relation)


def relation_holds(relation: str, a: int, b: int) -> bool:
    """Whether grid cell ``a`` is ``relation`` cell ``b``."""
    (ra, ca), (rb, cb) = divmod(a, GRID), divmod(b, GRID)
    return {"left of": ca < cb, "right of": ca > cb, "above": ra < rb, "below": ra > rb}[relation]


def _cells(caption: ThingCaption, rng: np.random.Generator) -> list[list[int]]:
    """A list of distinct cells per object phrase (``count`` cells each)."""
    n_cells = GRID * GRID
    chosen: list[list[int] | None] = [None] * len(caption.objects)
    if caption.relation is not None:
        options = [
            (a, b)
            for a in range(n_cells)
            for b in range(n_cells)
            if relation_holds(caption.relation, a, b)
        ]
        a, b = options[int(rng.integers(len(options)))]
        chosen = [[a], [b]]
    for i, spec in enumerate(caption.objects):
        if spec.position is not None:
            chosen[i] = [POSITIONS.index(spec.position)]
    used = {cell for cells in chosen if cells for cell in cells}
    free = [c for c in rng.permutation(n_cells).tolist() if c not in used]
    out: list[list[int]] = []
    for spec, cells in zip(caption.objects, chosen, strict=True):
        if cells is None:
            cells, free = free[: spec.count], free[spec.count :]
        out.append(cells)
    return out


def _in_cell(rng: np.random.Generator, spec: ThingSpec, cell: int) -> PlacedThing:
    size = spec.size or _pick(rng, SIZES)
    low, high = CELL_SIDE[size]
    side = int(rng.integers(low, high + 1))
    slack = max(0.0, (CELL - side) / 2 - 0.5)
    dx, dy = rng.uniform(-slack, slack, size=2).tolist()
    row, col = divmod(cell, GRID)
    centre = ((col + 0.5) * CELL + dx, (row + 0.5) * CELL + dy)
    return PlacedThing(spec.thing, spec.colour, side, centre, cell)


def _centred(rng: np.random.Generator, spec: ThingSpec) -> PlacedThing:
    low, high = CENTRED_SIDE[spec.size]
    side = low + 2 * int(rng.integers((high - low) // 2 + 1))
    slack = min(CENTRED_JITTER, (CANVAS - side) / 2)
    dx, dy = rng.uniform(-slack, slack, size=2).tolist()
    return PlacedThing(spec.thing, spec.colour, side, (CANVAS / 2 + dx, CANVAS / 2 + dy), None)


def _background(rng: np.random.Generator) -> str:
    return _pick(rng, _backgrounds_of(_weighted(rng, BACKGROUND_GROUPS)))


def layout(caption: ThingCaption, rng: np.random.Generator) -> ThingScene:
    """A random scene that satisfies every constraint of ``caption`` and nothing more."""
    background = _background(rng)
    (first,) = caption.objects[:1]
    if caption.total == 1 and first.position is None:
        placed: tuple[PlacedThing, ...] = (_centred(rng, first),)
    else:
        placed = tuple(
            _in_cell(rng, spec, cell)
            for spec, cells in zip(caption.objects, _cells(caption, rng), strict=True)
            for cell in cells
        )
    return ThingScene(placed, compose_caption(caption), background, "things", caption)


def _shapes_scene(rng: np.random.Generator, split: str) -> ThingScene:
    scene = sample_shapes_scene(rng, split)
    scale = CANVAS / (SHAPES_CELL * GRID)
    placed = tuple(
        PlacedThing(
            obj.shape,
            obj.colour,
            round(2 * RADIUS[obj.size] * scale),
            (obj.centre[0] * scale, obj.centre[1] * scale),
            obj.cell,
        )
        for obj in scene.objects
    )
    return ThingScene(placed, scene.caption, "black", "shapes", scene)


def sample_scene(
    rng: np.random.Generator,
    split: str = "train",
    *,
    family: str | None = None,
    shapes_share: float = SHAPES_SHARE,
    pool: tuple[Thing, ...] | None = None,
) -> ThingScene:
    """Draw a scene of ``split``: a shapes scene with probability ``shapes_share``, else a
    things scene of ``family`` (or a family drawn with :data:`FAMILIES`' frequencies) of
    things from ``pool`` (:func:`subset_pool`; default every emoji thing)."""
    check_split(split)
    if not 0.0 <= shapes_share <= 1.0:
        raise ValueError(f"shapes_share must be in [0, 1], got {shapes_share}")
    if family is None and rng.random() < shapes_share:
        return _shapes_scene(rng, split)
    return layout(sample_caption(rng, split, family=family, pool=pool), rng)


def placement(obj: PlacedThing) -> tuple[int, int, np.ndarray, np.ndarray]:
    """Where and what ``obj`` draws: ``(top, left, rgb, alpha)``, its sprite's top-left
    pixel and its straight colour ``(h, w, 3)`` and coverage ``(h, w)`` in ``[0, 1]``."""
    rgb, alpha = sprite_pixels(thing(obj.thing), obj.side, obj.colour)
    h, w = alpha.shape
    return round(obj.centre[1] - h / 2), round(obj.centre[0] - w / 2), rgb, alpha


def draw(scene: ThingScene) -> np.ndarray:
    """Render ``scene``.

    Returns:
        ``uint8`` array.

    Shape:
        ``(64, 64, 3)`` (H, W, RGB).
    """
    if scene.kind == "shapes":
        small = render_shapes(scene.parsed)  # type: ignore[arg-type]
        factor = CANVAS // small.shape[0]
        return np.repeat(np.repeat(small, factor, axis=0), factor, axis=1)
    return np.round(draw_float(scene) * 255.0).astype(np.uint8)


def draw_float(scene: ThingScene) -> np.ndarray:
    """Render ``scene`` as float32 ``(64, 64, 3)`` in ``[0, 1]`` (``draw`` without the
    rounding to bytes; a shapes scene is exact in both)."""
    if scene.kind == "shapes":
        return draw(scene).astype(np.float32) / np.float32(255.0)
    canvas = _background_fill(scene.background).copy()
    for obj in scene.objects:
        top, left, rgb, alpha = placement(obj)
        h, w = alpha.shape
        y0, x0 = max(top, 0), max(left, 0)
        y1, x1 = min(top + h, CANVAS), min(left + w, CANVAS)
        if y1 <= y0 or x1 <= x0:
            continue
        a = alpha[y0 - top : y1 - top, x0 - left : x1 - left, None]
        region = canvas[y0:y1, x0:x1]
        region *= 1.0 - a
        region += rgb[y0 - top : y1 - top, x0 - left : x1 - left] * a
    return canvas

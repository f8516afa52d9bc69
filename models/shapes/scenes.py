"""Turn a caption's constraints into a concrete scene that satisfies them exactly.

The scene holds exactly the objects the caption names (``count`` of each), in distinct grid
cells: stated positions are honoured, a relation "A <rel> B" puts A in a cell strictly
left of / right of / above / below B's (by grid column or row; with counts, every copy of
A from every copy of B), unstated sizes and cells are drawn at random, and each object
gets a jitter within ``JITTER[size]``.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from models.shapes.captions import ParsedCaption, compose_caption
from models.shapes.splits import check_split, sample_caption
from models.shapes.vocab import GRID, JITTER, POSITIONS, SIZES, Scene, SceneObject


def _relation_holds(relation: str, a: int, b: int) -> bool:
    """Whether cell ``a`` is ``relation`` cell ``b`` on the grid."""
    (ra, ca), (rb, cb) = divmod(a, GRID), divmod(b, GRID)
    return {"left of": ca < cb, "right of": ca > cb, "above": ra < rb, "below": ra > rb}[relation]


def object_cells(parsed: ParsedCaption, rng: np.random.Generator) -> list[list[int]]:
    """A list of grid cells per object phrase (``count`` cells each), all distinct, that
    satisfies the stated positions and relation (any thing: the cells do not depend on
    what the objects are)."""
    n_cells = GRID * GRID
    chosen: list[list[int] | None] = [None] * len(parsed.objects)
    if parsed.relation is not None:  # every copy of the first relates to every one of the second
        first, second = (spec.count for spec in parsed.objects)
        options = [
            (a, b)
            for a in combinations(range(n_cells), first)
            for b in combinations(range(n_cells), second)
            if all(_relation_holds(parsed.relation, i, j) for i in a for j in b)
        ]
        a, b = options[rng.integers(len(options))]
        chosen = [list(a), list(b)]
    for i, spec in enumerate(parsed.objects):
        if spec.position is not None:
            chosen[i] = [POSITIONS.index(spec.position)]
    used = {cell for cells in chosen if cells for cell in cells}
    free = [c for c in rng.permutation(n_cells).tolist() if c not in used]
    for i, spec in enumerate(parsed.objects):
        if chosen[i] is None:
            chosen[i], free = free[: spec.count], free[spec.count :]
    return chosen  # type: ignore[return-value]


def layout(parsed: ParsedCaption, rng: np.random.Generator) -> Scene:
    """A random scene that satisfies every constraint of ``parsed`` and nothing more.

    Raises:
        ValueError: when ``parsed`` names something other than a coloured shape (only
            those can be rendered).
    """
    objects = []
    for spec, cells in zip(parsed.objects, object_cells(parsed, rng), strict=True):
        if spec.colour is None:
            raise ValueError(f"a rendered shape needs a colour: {compose_caption(parsed)!r}")
        for cell in cells:
            size = spec.size or str(SIZES[rng.integers(len(SIZES))])
            jitter = JITTER[size]
            dx, dy = rng.uniform(-jitter, jitter, size=2).tolist()
            objects.append(SceneObject(spec.colour, spec.thing, size, cell, (dx, dy)))
    return Scene(tuple(objects), compose_caption(parsed))


def sample_scene(
    rng: np.random.Generator, split: str = "train", *, family: str | None = None
) -> Scene:
    """Draw a caption allowed in ``split`` and a scene that depicts it exactly.

    Args:
        rng: numpy random generator; the result is a function of its state.
        split: ``"train"`` (no held-out pair anywhere) or ``"heldout"`` (at least one).
        family: a template family of :data:`~models.shapes.splits.FAMILIES` or ``None``
            to draw one with the usual frequencies.

    Returns:
        :class:`~models.shapes.vocab.Scene` with ``objects`` and ``caption``.
    """
    check_split(split)
    return layout(sample_caption(rng, split, family=family), rng)

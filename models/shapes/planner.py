"""Layout planning: split a multi-object caption into one-object prompts, each in its cell.

The planner reads a caption of the grammar (:func:`~models.shapes.captions.parse_caption`),
draws a scene that satisfies it (:func:`~models.shapes.scenes.layout`: a relation puts its
first object strictly left of / right of / above / below the second, a count gives every
copy its own cell) and writes, per object, the one-object caption that names it at its
grid position, e.g. ``"a red circle to the left of a white square"`` ->
``["a red circle in the top left", "a white square on the right"]``. A caption's stated
size carries over; an unstated one stays unstated, so the model chooses as it would.

This is the layout half of layout-grounded generation (Lian et al. 2023 ask a language
model for the boxes; the grammar here is small enough to read exactly); the regional
denoiser (:mod:`models.diffusion.guidance`) is the other half.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.shapes.captions import ObjectSpec, object_phrase, parse_caption
from models.shapes.scenes import layout
from models.shapes.vocab import CELL, GRID, IMAGE_SIZE


@dataclass(frozen=True)
class RegionPrompt:
    """One planned object: its caption and the pixels of its grid cell.

    Shape:
        mask: ``(32, 32)`` bool, True on the cell.
    """

    prompt: str
    mask: np.ndarray


def cell_mask(cell: int) -> np.ndarray:
    """Boolean ``(32, 32)`` mask of grid cell ``cell`` (``row * 3 + col``); the nine
    cells tile the canvas exactly."""
    if not 0 <= cell < GRID * GRID:
        raise ValueError(f"cell must be in 0..{GRID * GRID - 1}, got {cell}")
    row, col = divmod(cell, GRID)
    mask = np.zeros((IMAGE_SIZE, IMAGE_SIZE), dtype=bool)
    mask[
        round(row * CELL) : round((row + 1) * CELL), round(col * CELL) : round((col + 1) * CELL)
    ] = True
    return mask


def plan_regions(caption: str, rng: np.random.Generator) -> list[RegionPrompt] | None:
    """The one-object prompts and cells of a caption naming several objects.

    Args:
        caption: any prompt.
        rng: draws the layout; the same state gives the same plan.

    Returns:
        One :class:`RegionPrompt` per object (a count of ``k`` gives ``k``), in distinct
        cells; ``None`` when there is nothing to plan: the caption is outside the grammar
        or names a single object (which the model draws from the caption as it is).
    """
    try:
        parsed = parse_caption(caption)
    except ValueError:
        return None
    if sum(spec.count for spec in parsed.objects) < 2:
        return None
    stated_size = {spec.pair: spec.size for spec in parsed.objects}
    return [
        RegionPrompt(
            object_phrase(
                ObjectSpec(
                    obj.colour,
                    obj.shape,
                    size=stated_size[(obj.colour, obj.shape)],
                    position=obj.position,
                )
            ),
            cell_mask(obj.cell),
        )
        for obj in layout(parsed, rng).objects
    ]

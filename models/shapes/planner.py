"""Layout planning: split a multi-object caption into one-object prompts, each in its cell.

The planner reads a caption of the grammar (:func:`~models.shapes.captions.parse_caption`),
chooses grid cells that satisfy it (:func:`~models.shapes.scenes.object_cells`: a relation
puts its first object strictly left of / right of / above / below the second, a count
gives every copy its own cell) and writes, per object, the one-object caption that names
it at its grid position, e.g. ``"a red circle to the left of a white square"`` ->
``["a red circle in the top left", "a white square on the right"]``, or ``"a cat above a
sofa"`` -> ``["a cat at the top", "a sofa in the center"]``. A caption's stated size and
colour carry over; an unstated one stays unstated, so the model chooses as it would.

The grid is the same 3x3 grid on any square canvas (32 px for the shapes checkpoint, 64
px for the everyday-things one): cell ``(row, col)`` covers rows
``round(row * s / 3) : round((row + 1) * s / 3)`` of an ``s``-pixel side, and likewise
columns, so the nine cells tile the canvas exactly.

This is the layout half of layout-grounded generation (Lian et al. 2023 ask a language
model for the boxes; the grammar here is small enough to read exactly); the regional
denoiser (:mod:`models.diffusion.guidance`) is the other half.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from models.shapes.captions import object_phrase, parse_caption
from models.shapes.scenes import object_cells
from models.shapes.vocab import GRID, IMAGE_SIZE, POSITIONS


@dataclass(frozen=True)
class RegionPrompt:
    """One planned object: its caption and the pixels of its grid cell.

    Shape:
        mask: ``(image_size, image_size)`` bool, True on the cell.
    """

    prompt: str
    mask: np.ndarray


def cell_mask(cell: int, image_size: int = IMAGE_SIZE) -> np.ndarray:
    """Boolean ``(image_size, image_size)`` mask of grid cell ``cell`` (``row * 3 + col``);
    the nine cells tile the canvas exactly."""
    if not 0 <= cell < GRID * GRID:
        raise ValueError(f"cell must be in 0..{GRID * GRID - 1}, got {cell}")
    if image_size < GRID:
        raise ValueError(f"the canvas must be at least {GRID} px wide, got {image_size}")
    row, col = divmod(cell, GRID)
    step = image_size / GRID
    mask = np.zeros((image_size, image_size), dtype=bool)
    mask[
        round(row * step) : round((row + 1) * step), round(col * step) : round((col + 1) * step)
    ] = True
    return mask


def plan_regions(
    caption: str, rng: np.random.Generator, image_size: int = IMAGE_SIZE
) -> list[RegionPrompt] | None:
    """The one-object prompts and cells of a caption naming several objects.

    Args:
        caption: any prompt.
        rng: draws the layout; the same state gives the same plan.
        image_size: the side of the square canvas in pixels (the masks' size).

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
    return [
        RegionPrompt(
            object_phrase(replace(spec, count=1, position=POSITIONS[cell])),
            cell_mask(cell, image_size),
        )
        for spec, cells in zip(parsed.objects, object_cells(parsed, rng), strict=True)
        for cell in cells
    ]

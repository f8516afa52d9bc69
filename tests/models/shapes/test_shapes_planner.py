"""plan_regions: one-object prompts in distinct cells that satisfy the caption."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation import score_image
from models.shapes import eval_prompts, parse_caption, render
from models.shapes.planner import cell_mask, plan_regions
from models.shapes.vocab import GRID, POSITIONS, Scene, SceneObject


def test_cells_tile_the_canvas():
    masks = np.stack([cell_mask(c) for c in range(GRID * GRID)])
    assert np.array_equal(masks.sum(axis=0), np.ones((32, 32)))


def test_cell_mask_rejects_cells_off_the_grid():
    with pytest.raises(ValueError, match="cell"):
        cell_mask(9)


@pytest.mark.parametrize(
    "caption", ["a red circle", "a small red circle in the top left", "a purple star", ""]
)
def test_nothing_to_plan_for_one_object_or_outside_the_grammar(caption):
    assert plan_regions(caption, np.random.default_rng(0)) is None


def _scene_of(plan) -> Scene:
    """Render each planned object at its cell as the one-object prompt says."""
    objects = []
    for region in plan:
        (spec,) = parse_caption(region.prompt).objects
        cell = POSITIONS.index(spec.position)
        assert np.array_equal(region.mask, cell_mask(cell))
        objects.append(SceneObject(spec.colour, spec.thing, spec.size or "large", cell))
    return Scene(tuple(objects), "")


@settings(max_examples=60, deadline=None)
@given(index=st.integers(0, 199), seed=st.integers(0, 2**32 - 1))
def test_the_plan_drawn_as_written_satisfies_the_caption(index, seed):
    caption = eval_prompts(200)[index]
    plan = plan_regions(caption, np.random.default_rng(seed))
    parsed = parse_caption(caption)
    if sum(spec.count for spec in parsed.objects) == 1:
        assert plan is None
        return
    assert len(plan) == sum(spec.count for spec in parsed.objects)
    for region in plan:
        (spec,) = parse_caption(region.prompt).objects
        assert spec.count == 1 and spec.position is not None
        stated = next(s for s in parsed.objects if s.pair == spec.pair)
        assert spec.size == stated.size
    assert score_image(render(_scene_of(plan)), caption).ok


def test_a_relation_is_planned_in_its_direction():
    for seed in range(20):
        first, second = plan_regions(
            "a red circle to the left of a white square", np.random.default_rng(seed)
        )
        col_first = POSITIONS.index(parse_caption(first.prompt).objects[0].position) % GRID
        col_second = POSITIONS.index(parse_caption(second.prompt).objects[0].position) % GRID
        assert col_first < col_second


def test_the_same_generator_state_gives_the_same_plan():
    caption = "three green triangles"
    a = plan_regions(caption, np.random.default_rng(5))
    b = plan_regions(caption, np.random.default_rng(5))
    assert [r.prompt for r in a] == [r.prompt for r in b]


@pytest.mark.parametrize("image_size", [32, 64, 48, 100])
def test_cells_tile_any_canvas(image_size):
    masks = np.stack([cell_mask(c, image_size) for c in range(GRID * GRID)])
    assert np.array_equal(masks.sum(axis=0), np.ones((image_size, image_size)))
    rows = masks.any(axis=2)  # (9, image_size): the rows each cell covers
    heights = rows.sum(axis=1)
    assert heights.max() - heights.min() <= 1  # near-equal thirds


def test_the_32_px_grid_is_unchanged():
    assert np.array_equal(cell_mask(4, 32), cell_mask(4))
    assert np.flatnonzero(cell_mask(4).any(axis=1)).tolist() == list(range(11, 21))


@pytest.mark.parametrize(
    ("caption", "relation"),
    [
        ("a cat above a sofa", "above"),
        ("a small red grinning cat to the left of a pair of shoes", "left of"),
        ("two blue squares above a green triangle", "above"),
        ("a rocket to the right of two pizzas", "right of"),
    ],
)
@pytest.mark.parametrize("image_size", [32, 64])
def test_open_things_are_planned_in_their_relation(caption, relation, image_size):
    parsed = parse_caption(caption)
    for seed in range(10):
        plan = plan_regions(caption, np.random.default_rng(seed), image_size)
        assert len(plan) == sum(spec.count for spec in parsed.objects)
        cells = {0: [], 1: []}
        for region in plan:
            (spec,) = parse_caption(region.prompt).objects
            assert spec.count == 1 and spec.position is not None
            owner = next(
                i for i, s in enumerate(parsed.objects) if (s.colour, s.thing) == spec.pair
            )
            assert spec.size == parsed.objects[owner].size
            cell = POSITIONS.index(spec.position)
            assert np.array_equal(region.mask, cell_mask(cell, image_size))
            cells[owner].append(divmod(cell, GRID))
        axis = 1 if relation in ("left of", "right of") else 0
        sign = -1 if relation in ("left of", "above") else 1
        assert all(sign * (a[axis] - b[axis]) > 0 for a in cells[0] for b in cells[1])

"""Scenes: layout constraints read back from the objects, colour variants, shapes scenes."""

import numpy as np
import pytest

from models.shapes import render as render_shapes
from models.shapes.vocab import POSITIONS
from models.things import (
    BACKGROUNDS,
    THING_HUES,
    ThingCaption,
    ThingSpec,
    colourable,
    dominant_hue,
    draw,
    layout,
    relation_holds,
    sample_scene,
    thing,
)
from models.things.scenes import CELL, GRID, placement


def _check_layout(scene):
    parsed: ThingCaption = scene.parsed
    objects = scene.objects
    assert len(objects) == parsed.total
    for spec in parsed.objects:
        assert sum(o.thing == spec.thing for o in objects) == spec.count
        mine = [o for o in objects if o.thing == spec.thing]
        assert all(o.colour == spec.colour for o in mine)
        if spec.position is not None:
            assert mine[0].cell == POSITIONS.index(spec.position)
    if parsed.total == 1 and parsed.objects[0].position is None:
        assert objects[0].cell is None
        return
    cells = [o.cell for o in objects]
    assert None not in cells and len(set(cells)) == len(cells)
    for o in objects:
        row, col = divmod(o.cell, GRID)
        top, left, _, alpha = placement(o)
        h, w = alpha.shape
        # the drawn box stays inside its cell (to rounding)
        assert col * CELL - 1 <= left and left + w <= (col + 1) * CELL + 1
        assert row * CELL - 1 <= top and top + h <= (row + 1) * CELL + 1
    if parsed.relation is not None:
        a = next(o for o in objects if o.thing == parsed.objects[0].thing)
        b = next(o for o in objects if o.thing == parsed.objects[1].thing)
        assert relation_holds(parsed.relation, a.cell, b.cell)


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_scenes_respect_counts_positions_and_relations(emoji_font, split):
    rng = np.random.default_rng(11)
    families = {"single": 0, "several": 0, "count": 0, "relation": 0}
    for family in families:
        for _ in range(60):
            _check_layout(sample_scene(rng, split, family=family))
    singles = [sample_scene(rng, split, shapes_share=0.0) for _ in range(400)]
    share = sum(s.parsed.total == 1 for s in singles) / len(singles)
    assert 0.55 < share < 0.8


def test_relations_hold_in_every_direction(emoji_font):
    rng = np.random.default_rng(5)
    for relation in ("left of", "right of", "above", "below"):
        caption = ThingCaption(
            (ThingSpec("rocket", "rocket"), ThingSpec("pizza", "pizza")), relation
        )
        for _ in range(10):
            _check_layout(layout(caption, rng))


def test_colour_variants_have_the_named_dominant_hue(emoji_font):
    rng = np.random.default_rng(7)
    names = list(THING_HUES)
    checked = 0
    for colour in names:
        for item in ("red_apple", "rocket", "cat_face", "pizza", "butterfly", "tulip"):
            caption = ThingCaption((ThingSpec(item, "x", colour=colour, size="large"),))
            if not colourable(thing(item)):
                continue
            scene = layout(caption, rng)
            image = draw(scene).astype(np.float32) / 255.0
            top, left, _, alpha = placement(scene.objects[0])
            h, w = alpha.shape
            region = image[top : top + h, left : left + w]
            hue = dominant_hue(region, alpha)
            nearest = min(names, key=lambda c: abs((hue - THING_HUES[c] + 180) % 360 - 180))
            assert nearest == colour, (item, colour, hue)
            checked += 1
    assert checked >= 5 * len(names)


def test_backgrounds_include_light_dark_and_plain(emoji_font):
    rng = np.random.default_rng(9)
    seen = {sample_scene(rng, shapes_share=0.0).background for _ in range(500)}
    groups = {BACKGROUNDS[name][1] for name in seen}
    assert groups == {"light", "dark", "plain"}
    assert {"white", "cream", "black"} <= seen


def test_shapes_scenes_keep_the_black_canvas_of_the_shapes_world():
    rng = np.random.default_rng(4)
    for _ in range(30):
        scene = sample_scene(rng, shapes_share=1.0)
        assert scene.kind == "shapes" and scene.background == "black"
        image = draw(scene)
        small = render_shapes(scene.parsed)
        assert np.array_equal(image, np.repeat(np.repeat(small, 2, axis=0), 2, axis=1))
        assert np.array_equal(image[0, 0], [0, 0, 0]) or scene.objects[0].cell == 0
        assert scene.caption == scene.parsed.caption
        assert {o.thing for o in scene.objects} <= {"circle", "square", "triangle"}


def test_bad_arguments_raise():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        sample_scene(rng, "test")
    with pytest.raises(ValueError):
        sample_scene(rng, shapes_share=1.5)
    with pytest.raises(ValueError):
        sample_scene(rng, family="crowd", shapes_share=0.0)

"""ShapesDataset, scenes and the held-out split, checked against the captions directly."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage

from models.shapes import (
    COLOURS,
    HELDOUT_PAIRS,
    PALETTE,
    POSITIONS,
    SHAPES,
    TRAIN_PAIRS,
    ShapesDataset,
    eval_prompts,
    parse_caption,
    render,
    sample_scene,
)
from models.shapes.render import object_mask
from models.shapes.vocab import CELL

seeds = st.integers(0, 2**32 - 1)


def test_items_are_float_images_with_captions():
    dataset = ShapesDataset(length=10)
    assert len(dataset) == 10
    image, caption = dataset[3]
    assert image.dtype == torch.float32
    assert image.shape == (3, 32, 32)
    assert image.min() >= 0.0 and image.max() <= 1.0
    assert isinstance(caption, str) and caption
    with pytest.raises(IndexError):
        dataset[10]


def test_items_are_deterministic_in_seed_and_index():
    a, b = ShapesDataset(seed=7), ShapesDataset(seed=7)
    for i in (0, 1, 99_999):
        assert torch.equal(a[i][0], b[i][0]) and a[i][1] == b[i][1]
    other = ShapesDataset(seed=8)
    assert [a[i][1] for i in range(20)] != [other[i][1] for i in range(20)]
    assert len({a[i][1] for i in range(20)}) > 15


@pytest.mark.parametrize(("split", "length"), [("test", 10), ("train", 0)])
def test_bad_arguments_raise(split, length):
    with pytest.raises(ValueError):
        ShapesDataset(split, length=length)


def test_held_out_pairs_leave_every_colour_and_shape_in_training():
    assert {c for c, _ in TRAIN_PAIRS} == set(COLOURS)
    assert {s for _, s in TRAIN_PAIRS} == set(SHAPES)
    assert set(TRAIN_PAIRS).isdisjoint(HELDOUT_PAIRS)
    assert len(TRAIN_PAIRS) + len(HELDOUT_PAIRS) == len(COLOURS) * len(SHAPES)


def test_train_split_never_shows_a_held_out_pair_and_heldout_always_does():
    train, heldout = ShapesDataset("train", seed=1), ShapesDataset("heldout", seed=1)
    seen = set()
    for i in range(1500):
        scene = train.scene(i)
        drawn = {(o.colour, o.shape) for o in scene.objects}
        named = {spec.pair for spec in parse_caption(scene.caption).objects}
        assert drawn == named and not drawn & HELDOUT_PAIRS
        seen |= drawn
        scene = heldout.scene(i)
        named = {spec.pair for spec in parse_caption(scene.caption).objects}
        assert named & HELDOUT_PAIRS
    assert seen == set(TRAIN_PAIRS)


@given(seeds, st.sampled_from(["train", "heldout"]))
@settings(max_examples=300, deadline=None)
def test_scene_depicts_exactly_its_caption(seed, split):
    """Counts, positions and relations read off the scene's grid cells, not the scorer."""
    scene = sample_scene(np.random.default_rng(seed), split)
    parsed = parse_caption(scene.caption)
    assert len(scene.objects) == sum(spec.count for spec in parsed.objects) <= 3
    groups = []
    for spec in parsed.objects:
        group = [o for o in scene.objects if (o.colour, o.shape) == spec.pair]
        assert len(group) == spec.count
        if spec.size is not None:
            assert all(o.size == spec.size for o in group)
        if spec.position is not None:
            assert group[0].cell == POSITIONS.index(spec.position)
        groups.append(group)
    if parsed.relation is not None:
        (a,), (b,) = groups
        expected = {
            "left of": a.col < b.col,
            "right of": a.col > b.col,
            "above": a.row < b.row,
            "below": a.row > b.row,
        }
        assert expected[parsed.relation]


@given(seeds)
@settings(max_examples=200, deadline=None)
def test_render_keeps_objects_apart_inside_their_cells(seed):
    scene = sample_scene(np.random.default_rng(seed), "train")
    image = render(scene)
    assert image.dtype == np.uint8 and image.shape == (32, 32, 3)
    covered = np.zeros((32, 32), dtype=bool)
    for obj in scene.objects:
        mask = object_mask(obj)
        assert mask.sum() >= 12
        rows, cols = np.nonzero(mask)
        # every pixel centre lies in the object's own grid cell
        assert np.all((rows + 0.5) // CELL == obj.row) and np.all((cols + 0.5) // CELL == obj.col)
        # no other object within one pixel (8-neighbourhood): components never merge
        halo = ndimage.binary_dilation(mask, structure=np.ones((3, 3), dtype=bool))
        assert not (halo & covered).any()
        covered |= mask
        assert np.all(image[mask] == PALETTE[obj.colour])
    assert np.all(image[~covered] == 0)


def test_eval_prompts_are_fixed_distinct_and_held_out():
    prompts = eval_prompts(200)
    assert prompts == eval_prompts(200, seed=0)
    assert len(prompts) == len(set(prompts)) == 200
    assert eval_prompts(50) == prompts[:50]
    assert eval_prompts(50, seed=1) != prompts[:50]
    for prompt in prompts:
        assert {spec.pair for spec in parse_caption(prompt).objects} & HELDOUT_PAIRS
    with pytest.raises(ValueError):
        eval_prompts(0)


def test_train_eval_prompts_never_name_a_heldout_pair_and_differ_from_heldout():
    train = eval_prompts(200, split="train")
    assert len(set(train)) == 200
    assert eval_prompts(30, split="train") == train[:30]
    assert not set(train) & set(eval_prompts(200))
    for prompt in train:
        assert not {spec.pair for spec in parse_caption(prompt).objects} & HELDOUT_PAIRS
    with pytest.raises(ValueError, match="unknown split"):
        eval_prompts(5, split="test")

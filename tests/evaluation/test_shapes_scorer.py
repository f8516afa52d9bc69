"""The scorer: 100% on the generator's own renders, and it rejects wrong images."""

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import ndimage

from evaluation import detect_objects, score_image
from models.shapes import (
    COLOURS,
    FAMILIES,
    SHAPES,
    SIZES,
    Scene,
    SceneObject,
    ShapesDataset,
    parse_caption,
    render,
    sample_scene,
)
from models.shapes.vocab import JITTER

seeds = st.integers(0, 2**32 - 1)


@pytest.mark.parametrize("split", ["train", "heldout"])
@pytest.mark.parametrize("family", tuple(FAMILIES))
def test_scores_every_ground_truth_render(family, split):
    rng = np.random.default_rng(1234)
    for _ in range(500):
        scene = sample_scene(rng, split, family=family)
        result = score_image(render(scene), scene.caption)
        assert result.ok, (scene, result)
        assert len(result.objects) == len(scene.objects)
        parsed = parse_caption(scene.caption)
        assert (result.relation is None) == (parsed.relation is None)
        assert (result.count is None) == (not any(s.counted for s in parsed.objects))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("size", SIZES)
def test_detects_each_object_at_every_cell_and_extreme_jitter(shape, size):
    j = JITTER[size]
    for cell in range(9):
        for offset in [(-j, -j), (-j, j), (j, -j), (j, j), (0.0, 0.0)]:
            obj = SceneObject("orange", shape, size, cell, offset)
            (found,) = detect_objects(render(Scene((obj,), "x")))
            assert (found.colour, found.shape, found.size, found.cell) == (
                "orange",
                shape,
                size,
                cell,
            )


def test_same_colour_neighbours_pushed_together_stay_two_objects():
    for size in SIZES:
        j = JITTER[size]
        left = SceneObject("white", "square", size, 3, (j, 0.0))  # pushed right
        right = SceneObject("white", "square", size, 4, (-j, j))  # pushed left and down
        below = SceneObject("white", "square", size, 7, (0.0, -j))  # pushed up
        assert len(detect_objects(render(Scene((left, right, below), "x")))) == 3


def test_accepts_tensor_and_array_layouts():
    image, caption = ShapesDataset(seed=5)[0]
    as_uint8 = (image * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    for variant in (image, image.numpy(), as_uint8, image.permute(1, 2, 0).double()):
        assert score_image(variant, caption).ok
    with pytest.raises(ValueError):
        score_image(torch.zeros(3, 64, 64), caption)
    with pytest.raises(ValueError):
        score_image(image, "a purple circle")


@given(seeds, st.floats(0.85, 1.0))
@example(seed=10194, brightness=0.875)  # noise took a small triangle's apex
@example(seed=3132, brightness=0.85)  # noise gave a small circle a pointed top
@settings(max_examples=100, deadline=None)
def test_tolerates_soft_edges_dimming_and_noise(seed, brightness):
    """Generated images are never crisp: blur (sigma 0.5 px), dim to 85% and add noise."""
    rng = np.random.default_rng(seed)
    scene = sample_scene(rng)
    soft = ndimage.gaussian_filter(render(scene) / 255.0, sigma=(0.5, 0.5, 0.0))
    noisy = brightness * soft + rng.normal(0.0, 0.05, size=(32, 32, 3))
    assert score_image(noisy.clip(0, 1), scene.caption).ok


def _replace(scene: Scene, index: int, **changes) -> Scene:
    objects = list(scene.objects)
    objects[index] = dataclasses.replace(objects[index], **changes)
    return Scene(tuple(objects), scene.caption)


def _unused_colours(scene: Scene, index: int) -> list[str]:
    """Colours no object of ``scene`` has (another object's colour could match it)."""
    used = {o.colour for o in scene.objects}
    return [c for c in COLOURS if c not in used]


def _other_shapes(scene: Scene, index: int) -> list[str]:
    """Shapes other than object ``index``'s."""
    return [s for s in SHAPES if s != scene.objects[index].shape]


@pytest.mark.parametrize(
    ("field", "wrong_values"), [("colour", _unused_colours), ("shape", _other_shapes)]
)
@given(seeds, st.data())
@settings(max_examples=150, deadline=None)
def test_rejects_a_wrong_attribute(field, wrong_values, seed, data):
    """One object drawn with a wrong colour or shape fails that check and the whole score."""
    scene = sample_scene(np.random.default_rng(seed))
    index = data.draw(st.integers(0, len(scene.objects) - 1))
    value = data.draw(st.sampled_from(wrong_values(scene, index)))
    result = score_image(render(_replace(scene, index, **{field: value})), scene.caption)
    assert getattr(result, field) is False and not result.ok


@given(seeds, st.data())
@settings(max_examples=150, deadline=None)
def test_rejects_a_missing_object(seed, data):
    scene = sample_scene(np.random.default_rng(seed))
    if len(scene.objects) == 1:
        image = np.zeros((32, 32, 3), dtype=np.uint8)
    else:
        index = data.draw(st.integers(0, len(scene.objects) - 1))
        kept = scene.objects[:index] + scene.objects[index + 1 :]
        image = render(Scene(kept, scene.caption))
    result = score_image(image, scene.caption)
    assert result.shape is False and not result.ok


@given(seeds)
@settings(max_examples=150, deadline=None)
def test_rejects_a_swapped_relation(seed):
    scene = sample_scene(np.random.default_rng(seed), family="relation")
    a, b = scene.objects
    swapped = Scene(
        (dataclasses.replace(a, cell=b.cell), dataclasses.replace(b, cell=a.cell)), scene.caption
    )
    result = score_image(render(swapped), scene.caption)
    assert result.relation is False and not result.ok
    assert result.colour and result.shape


@given(seeds)
@settings(max_examples=100, deadline=None)
def test_rejects_an_extra_counted_object(seed):
    scene = sample_scene(np.random.default_rng(seed), family="count")
    counted = scene.objects[0]
    if len(scene.objects) == 3:  # "three X": drop one so two remain
        image = render(Scene(scene.objects[1:], scene.caption))
    else:  # add one more X in a free cell
        free = next(c for c in range(9) if c not in {o.cell for o in scene.objects})
        extra = dataclasses.replace(counted, cell=free)
        image = render(Scene((*scene.objects, extra), scene.caption))
    result = score_image(image, scene.caption)
    assert result.count is False and not result.ok


@given(seeds, st.data())
@settings(max_examples=100, deadline=None)
def test_rejects_a_wrong_position_or_size(seed, data):
    scene = sample_scene(np.random.default_rng(seed), family="single")
    (obj,) = scene.objects
    spec = parse_caption(scene.caption).objects[0]
    if spec.position is not None:
        cell = data.draw(st.sampled_from([c for c in range(9) if c != obj.cell]))
        result = score_image(render(_replace(scene, 0, cell=cell)), scene.caption)
        assert result.position is False and not result.ok
    if spec.size is not None:
        size = "small" if obj.size == "large" else "large"
        result = score_image(
            render(_replace(scene, 0, size=size, offset=(0.0, 0.0))), scene.caption
        )
        assert result.size is False and not result.ok


@given(seeds, st.data())
@settings(max_examples=100, deadline=None)
def test_rejects_an_object_the_caption_does_not_name(seed, data):
    scene = sample_scene(np.random.default_rng(seed))
    named = {(o.colour, o.shape) for o in scene.objects}
    colour = data.draw(st.sampled_from(COLOURS))
    shape = data.draw(st.sampled_from([s for s in SHAPES if (colour, s) not in named]))
    free = data.draw(
        st.sampled_from([c for c in range(9) if c not in {o.cell for o in scene.objects}])
    )
    stray = SceneObject(colour, shape, data.draw(st.sampled_from(SIZES)), free)
    result = score_image(render(Scene((*scene.objects, stray), scene.caption)), scene.caption)
    assert result.exact is False and not result.ok
    assert result.shape and result.count in (None, True) and result.relation in (None, True)


def test_joint_check_needs_one_object_with_every_attribute():
    caption = "a small red circle in the top left"
    wrong_place = SceneObject("red", "circle", "small", 4)
    wrong_size = SceneObject("red", "circle", "large", 0)
    result = score_image(render(Scene((wrong_place, wrong_size), caption)), caption)
    assert result.size and result.position and result.colour and result.shape
    assert not result.ok

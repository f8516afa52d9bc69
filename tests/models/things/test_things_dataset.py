"""ThingsDataset: item format, determinism by (seed, split, index), the shapes share."""

import pytest
import torch

from models.things import ThingsDataset


def test_items_are_float_images_with_captions(emoji_font):
    dataset = ThingsDataset(length=10)
    assert len(dataset) == 10
    image, caption = dataset[3]
    assert image.dtype == torch.float32 and image.shape == (3, 64, 64)
    assert image.min() >= 0.0 and image.max() <= 1.0
    assert isinstance(caption, str) and caption
    with pytest.raises(IndexError):
        dataset[10]
    small, _ = ThingsDataset(length=10, image_size=32)[3]
    assert small.shape == (3, 32, 32)


def test_items_are_deterministic_in_seed_split_and_index(emoji_font):
    a, b = ThingsDataset(seed=7), ThingsDataset(seed=7)
    for i in (0, 1, 999_999):
        (xa, ca), (xb, cb) = a[i], b[i]
        assert xa.numpy().tobytes() == xb.numpy().tobytes() and ca == cb
    other = ThingsDataset(seed=8)
    assert [a[i][1] for i in range(20)] != [other[i][1] for i in range(20)]
    held = ThingsDataset("heldout", seed=7)
    assert [a[i][1] for i in range(20)] != [held[i][1] for i in range(20)]
    assert len({a[i][1] for i in range(40)}) > 35


def test_the_shapes_share_sets_how_many_scenes_are_shapes(emoji_font):
    dataset = ThingsDataset(seed=1, shapes_share=0.1)
    kinds = [dataset.scene(i).kind for i in range(600)]
    assert 0.05 < kinds.count("shapes") / len(kinds) < 0.16
    assert ThingsDataset(shapes_share=0.0).scene(0).kind == "things"
    only = ThingsDataset(shapes_share=1.0)
    assert all(only.scene(i).kind == "shapes" for i in range(20))


@pytest.mark.parametrize(
    "kwargs", [{"split": "test"}, {"length": 0}, {"image_size": 4}, {"shapes_share": -0.1}]
)
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        ThingsDataset(**kwargs)


def test_a_subset_draws_only_its_things_spread_over_the_vocabulary():
    from models.things import subset_pool

    pool = subset_pool(12)
    keys = {item.key for item in pool}
    assert len(keys) == 12
    everything = subset_pool(None)
    positions = sorted(everything.index(item) for item in pool)
    assert positions[-1] - positions[0] > len(everything) // 2  # not one corner of the table
    stream = ThingsDataset("train", seed=3, things=12, shapes_share=0.0)
    drawn = {obj.thing for i in range(300) for obj in stream.scene(i).objects}
    assert drawn <= keys and len(drawn) >= 10
    heldout = ThingsDataset("heldout", seed=3, things=12, shapes_share=0.0)
    assert {obj.thing for i in range(100) for obj in heldout.scene(i).objects} <= keys
    with pytest.raises(ValueError, match="subset"):
        subset_pool(2)

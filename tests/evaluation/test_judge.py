"""The judge: its shapes, that it learns, its checkpoint format and the Fréchet distance."""

import numpy as np
import pytest
import torch

from evaluation.judge import (
    Judge,
    JudgeConfig,
    JudgeRenders,
    cosine_lr,
    frechet_distance,
    load_judge,
    read_metadata,
    save_judge,
    train_steps,
)
from models.things.vocab import thing_keys


def test_the_full_judge_has_a_few_million_parameters_and_the_right_shapes():
    model = Judge(JudgeConfig(thing_keys()))
    params = sum(p.numel() for p in model.parameters())
    assert 1_000_000 <= params <= 3_000_000
    x = torch.rand(2, 3, 64, 64)
    assert model(x).shape == (2, len(thing_keys()))
    assert model.features(x).shape == (2, model.feature_dim)
    with pytest.raises(ValueError):
        model.features(torch.rand(2, 64, 64))


@pytest.mark.parametrize("kwargs", [{"classes": ("a",)}, {"classes": ("a", "a")}, {"width": 12}])
def test_bad_configs_raise(kwargs):
    with pytest.raises(ValueError):
        JudgeConfig(**{"classes": ("a", "b"), **kwargs})


def test_a_tiny_judge_learns_a_five_class_subset(emoji_font):
    torch.manual_seed(0)
    classes = ("circle", "square", "triangle", "rocket", "red_apple")
    renders = JudgeRenders(classes, seed=0)
    images, labels = zip(*(renders[i] for i in range(20)), strict=True)
    batch = (torch.stack(images), torch.tensor(labels))
    model = Judge(JudgeConfig(classes, width=8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.dropout.p = 0.0
    step, losses = train_steps(model, optimizer, iter([batch] * 40), steps=40, lr_at=lambda k: 3e-3)
    assert step == 40 and len(losses) == 40
    assert np.mean(losses[-5:]) < 0.6 * losses[0]


def test_renders_are_deterministic_and_labels_cover_the_classes(emoji_font):
    classes = ("circle", "rocket", "pizza")
    a, b = JudgeRenders(classes, seed=3), JudgeRenders(classes, seed=3)
    for i in (0, 5):
        assert torch.equal(a[i][0], b[i][0]) and a[i][1] == b[i][1]
    assert {a[i][1] for i in range(30)} == {0, 1, 2}
    image, _ = a[0]
    assert image.shape == (3, 64, 64) and image.min() >= 0.0 and image.max() <= 1.0


def test_checkpoints_round_trip_with_their_metadata(tmp_path):
    model = Judge(JudgeConfig(("circle", "square", "triangle"), width=8)).eval()
    path = tmp_path / "judge.safetensors"
    save_judge(model, path, {"steps": 7, "heldout_top1": 0.5})
    loaded = load_judge(path)
    x = torch.rand(3, 3, 64, 64)
    assert torch.equal(model(x), loaded(x))
    meta = read_metadata(path)
    assert meta["steps"] == 7 and meta["heldout_top1"] == 0.5
    assert loaded.config == model.config


def test_frechet_distance_is_zero_on_itself_symmetric_and_exact_for_a_shift():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(400, 6))
    b = rng.normal(size=(300, 6)) * 1.5 + 0.3
    assert abs(frechet_distance(a, a)) < 1e-6
    assert frechet_distance(a, b) == pytest.approx(frechet_distance(b, a), rel=1e-6)
    shift = np.array([1.0, -2.0, 0.0, 0.5, 0.0, 0.0])
    assert frechet_distance(a, a + shift) == pytest.approx(float(shift @ shift), rel=1e-6)
    # two isotropic Gaussians: ||mu||^2 + D (s_a - s_b)^2 (sample statistics, loosely)
    wide = rng.normal(size=(20000, 3)) * 2.0
    narrow = rng.normal(size=(20000, 3))
    assert frechet_distance(wide, narrow) == pytest.approx(3.0, rel=0.05)
    with pytest.raises(ValueError):
        frechet_distance(a, rng.normal(size=(10, 5)))


def test_the_learning_rate_warms_up_then_decays():
    assert cosine_lr(1.0, 0, 0.0, warmup=10) == pytest.approx(0.1)
    assert cosine_lr(1.0, 50, 0.0, warmup=10) == pytest.approx(1.0)
    assert cosine_lr(1.0, 50, 1.0, warmup=10) == pytest.approx(0.05)
    assert cosine_lr(1.0, 50, 0.5, warmup=10) == pytest.approx(0.525)

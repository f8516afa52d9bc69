"""Token grounding: word spans, patch masks, token targets, the loss and its training use."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.dit.config import get_preset
from models.dit.grounding import grounding_loss, phrase_masks, phrase_word_spans, token_targets
from models.dit.model import DiT
from models.shapes import compose_caption, layout, parse_caption, sample_caption
from models.shapes.render import object_mask
from models.text_encoder import FakeTextEncoder

pytestmark = pytest.mark.usefixtures("single_thread")


def _grounded_words(caption: str) -> list[list[str]]:
    return [[caption[a:b] for a, b in spans] for spans in phrase_word_spans(parse_caption(caption))]


@pytest.mark.parametrize(
    ("caption", "expected"),
    [
        (
            "a small red circle to the left of a red square",
            [["small", "red", "circle"], ["red", "square"]],
        ),
        (
            "two green circles and a large blue triangle",
            [["green", "circles"], ["large", "blue", "triangle"]],
        ),
        ("a white circle in the top left", [["white", "circle"]]),
        (
            "a red triangle, a red circle and a white circle",
            [["red", "triangle"], ["red", "circle"], ["white", "circle"]],
        ),
    ],
)
def test_phrase_word_spans_pick_each_objects_size_colour_and_shape(caption, expected):
    assert compose_caption(parse_caption(caption)) == caption
    assert _grounded_words(caption) == expected


def test_phrase_word_spans_locate_repeated_words_by_phrase():
    caption = "a red circle above a red square"
    first, second = phrase_word_spans(parse_caption(caption))
    assert first[0] < second[0]  # the second "red" is the second phrase's
    assert caption[second[0][0] :].startswith("red square")


def test_phrase_masks_are_the_patches_each_phrase_touches():
    rng = np.random.default_rng(3)
    for _ in range(20):
        parsed = sample_caption(rng, "train")
        scene = layout(parsed, rng)
        masks = phrase_masks(scene, parsed, patch_size=1)  # one pixel per patch
        index = 0
        for phrase, spec in enumerate(parsed.objects):
            union = np.zeros((32, 32), dtype=bool)
            for obj in scene.objects[index : index + spec.count]:
                union |= object_mask(obj)
            index += spec.count
            np.testing.assert_array_equal(masks[phrase].numpy(), union.reshape(-1))
        coarse = phrase_masks(scene, parsed, patch_size=4)
        pooled = masks.reshape(-1, 8, 4, 8, 4).amax(dim=(2, 4)).reshape(len(parsed.objects), 64)
        torch.testing.assert_close(coarse, pooled)


def test_phrase_masks_reject_a_scene_of_another_caption():
    rng = np.random.default_rng(0)
    parsed = parse_caption("two red circles")
    scene = layout(parse_caption("a red circle"), rng)
    with pytest.raises(ValueError, match="names 2 objects"):
        phrase_masks(scene, parsed, 4)


def test_token_targets_follow_word_pieces():
    caption = "a magenta circle below a large cyan square"
    masks = torch.eye(2, 64)
    # tokens as a WordPiece encoder splits them: [CLS] a mage ##nta circle below a large cy ##an square [SEP]
    words = ["a", "mage", "nta", "circle", "below", "a", "large", "cy", "an", "square"]
    spans, cursor = [None], 0
    for piece in words:
        start = caption.index(piece, cursor)
        spans.append((start, start + len(piece)))
        cursor = start + len(piece)
    spans.append(None)
    targets, grounded = token_targets(spans, phrase_word_spans(parse_caption(caption)), masks, 14)
    expected = [0, 0, 1, 1, 1, 0, 0, 2, 2, 2, 2, 0, 0, 0]  # 1: first phrase, 2: second
    assert grounded.tolist() == [e > 0 for e in expected]
    for j, phrase in enumerate(expected):
        if phrase:
            torch.testing.assert_close(targets[j], masks[phrase - 1])
        else:
            assert targets[j].abs().sum() == 0


def _reference_loss(attention, targets, grounded):
    """Loops in float64: mean over maps of the mean over grounded tokens of (1 - in/total)^2."""
    values = []
    for maps in attention:
        maps = maps.double()
        per_map = []
        for b in range(maps.shape[0]):
            for j in range(maps.shape[2]):
                if grounded[b, j]:
                    column = maps[b, :, j]
                    inside = float((column * targets[b, j].double()).sum())
                    per_map.append((1 - inside / float(column.sum())) ** 2)
        values.append(np.mean(per_map))
    return float(np.mean(values))


def test_grounding_loss_matches_its_definition():
    generator = torch.Generator().manual_seed(0)
    attention = [torch.rand(3, 16, 5, generator=generator).softmax(-1) for _ in range(2)]
    targets = (torch.rand(3, 5, 16, generator=generator) < 0.3).float()
    grounded = torch.rand(3, 5, generator=generator) < 0.6
    loss = grounding_loss(attention, targets, grounded)
    assert loss.item() == pytest.approx(_reference_loss(attention, targets, grounded), rel=1e-5)


def test_grounding_loss_is_zero_when_attention_stays_inside_and_one_when_outside():
    targets = torch.zeros(1, 2, 4)
    targets[0, 0, :2] = 1
    grounded = torch.tensor([[True, False]])
    inside = torch.tensor([[[0.9, 0.1], [0.8, 0.2], [0.0, 1.0], [0.0, 1.0]]])  # (B, T, L)
    assert grounding_loss([inside], targets, grounded).item() == pytest.approx(0.0)
    outside = inside.flip(1)
    assert grounding_loss([outside], targets, grounded).item() == pytest.approx(1.0)
    none = torch.zeros(1, 2, dtype=torch.bool)
    assert grounding_loss([inside], targets, none).item() == 0.0


def test_attention_maps_leave_the_prediction_unchanged():
    torch.manual_seed(0)
    model = DiT(get_preset("tiny")).eval()
    for parameter in model.parameters():  # leave the zero initialisation: every branch counts
        torch.nn.init.normal_(parameter, std=0.1)
    cond = FakeTextEncoder(dim=model.config.text_dim).encode(
        ["a small red circle in the top left", "two blue squares"]
    )
    x, t = torch.randn(2, 3, 32, 32), torch.tensor([10, 900])
    attention: list[torch.Tensor] = []
    with torch.no_grad():
        plain = model(x, t, cond)
        collected = model(x, t, cond, attention=attention)
    torch.testing.assert_close(collected, plain, rtol=1e-5, atol=1e-5)
    assert len(attention) == model.config.depth
    for maps in attention:
        assert maps.shape == (2, model.config.num_tokens, cond.tokens.shape[1])
        torch.testing.assert_close(maps.sum(-1), torch.ones(2, model.config.num_tokens))
        assert (maps[~cond.mask[:, None, :].expand_as(maps)] == 0).all()  # padding unattended


def test_grounding_steps_pull_attention_onto_the_objects():
    """Training on the grounding loss alone lowers it on a fixed batch."""
    from models.dit.train import TrainConfig, Trainer

    config = TrainConfig(
        preset="tiny",
        batch_size=8,
        lr=3e-3,
        warmup_steps=1,
        precision="fp32",
        grounding_weight=1.0,
    )
    trainer = Trainer(config, encoder=FakeTextEncoder())
    x0, captions = trainer.batch(0)
    cond = trainer.encoder.encode(captions)
    drop = torch.zeros(len(captions), dtype=torch.bool)
    targets, grounded = trainer.grounding_targets(0, cond.tokens.shape[1], drop)
    assert grounded.any()
    t = torch.full((len(captions),), 500)

    def loss() -> torch.Tensor:
        attention: list[torch.Tensor] = []
        trainer.model(x0, t, cond, attention=attention)
        return grounding_loss(attention, targets, grounded)

    optimizer = torch.optim.Adam(trainer.model.parameters(), lr=3e-3)
    before = loss().item()
    for _ in range(30):
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()
    assert loss().item() < 0.8 * before


def test_grounding_targets_skip_dropped_captions():
    from models.dit.train import TrainConfig, Trainer

    config = TrainConfig(preset="tiny", batch_size=4, precision="fp32", grounding_weight=0.1)
    trainer = Trainer(config, encoder=FakeTextEncoder())
    drop = torch.tensor([True, False, True, False])
    _, captions = trainer.batch(0)
    length = trainer.encoder.encode(captions).tokens.shape[1]
    _, grounded = trainer.grounding_targets(0, length, drop)
    assert not grounded[drop].any()
    assert grounded[~drop].any(dim=1).all()


def test_trainer_with_grounding_takes_steps():
    from models.dit.train import TrainConfig, Trainer

    config = TrainConfig(preset="tiny", batch_size=4, precision="fp32", grounding_weight=0.1)
    trainer = Trainer(config, encoder=FakeTextEncoder())
    losses = [trainer.train_step() for _ in range(3)]
    assert all(np.isfinite(losses)) and trainer.step == 3


def test_grounding_needs_scenes_and_cross_attention():
    import dataclasses

    from models.dit.train import TrainConfig, Trainer

    config = TrainConfig(preset="tiny", batch_size=2, precision="fp32", grounding_weight=0.1)
    images = [(torch.zeros(3, 32, 32), "a red circle")] * 4
    with pytest.raises(ValueError, match="scene"):
        Trainer(config, encoder=FakeTextEncoder(), dataset=images)
    no_cross = dataclasses.replace(get_preset("tiny"), cross_attention=False)
    with pytest.raises(ValueError, match="cross_attention"):
        Trainer(config, encoder=FakeTextEncoder(), model_config=no_cross)
    with pytest.raises(ValueError, match="grounding_weight"):
        TrainConfig(grounding_weight=-1.0)
    with pytest.raises(ValueError, match="cross_attention"):
        DiT(no_cross)(torch.zeros(1, 3, 32, 32), torch.zeros(1), None, attention=[])


def _load_text_order_probe():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "text_order_probe.py"
    spec = importlib.util.spec_from_file_location("text_order_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_text_order_probe_labels_the_left_or_upper_object():
    probe = _load_text_order_probe()
    encoder = FakeTextEncoder(dim=8)
    captions = [
        "a red circle to the left of a blue square",
        "a small red circle to the right of a blue square",
        "a green triangle below a large white circle",
    ]
    features, labels = probe.colour_token_features(encoder, captions)
    assert labels.tolist() == [1, 0, 0, 1, 0, 1]
    # the fake encoder's states are per-word vectors: each feature is its colour's vector
    expected = ["red", "blue", "red", "blue", "green", "white"]
    for row, colour in zip(features, expected, strict=True):
        torch.testing.assert_close(row, encoder.encode([colour]).tokens[0, 0])


def test_text_order_probe_separates_what_a_linear_map_can():
    probe = _load_text_order_probe()
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(400, 2, generator=generator)
    xor = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).float()
    torch.manual_seed(0)
    _, linear = probe.fit_and_score(torch.nn.Linear(2, 1), x, xor, 300, 300)
    mlp = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
    _, nonlinear = probe.fit_and_score(mlp, x, xor, 300, 1500)
    assert linear < 0.7 and nonlinear > 0.9


def test_batch_targets_read_each_scene_and_exchange_reverses_the_masks():
    from models.dit.grounding import batch_targets

    rng = np.random.default_rng(2)
    captions = ["a red circle to the left of a blue square", "two green triangles"]
    scenes = [layout(parse_caption(c), rng) for c in captions]
    spans = FakeTextEncoder(dim=8).token_spans(captions)
    targets, grounded = batch_targets(scenes, spans, 4, 10)
    exchanged, same = batch_targets(scenes, spans, 4, 10, exchange=True)
    assert torch.equal(grounded, same) and targets.shape == (2, 10, 64)
    first = phrase_masks(scenes[0], parse_caption(captions[0]), 4)
    torch.testing.assert_close(targets[0, 1], first[0])  # "red"
    torch.testing.assert_close(exchanged[0, 1], first[1])
    torch.testing.assert_close(exchanged[1], targets[1])  # one phrase: nothing to exchange

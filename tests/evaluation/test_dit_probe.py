"""The caption-use probe: contrast captions, x0 estimates, denoising errors, used share."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from evaluation.probe import (
    denoising_errors,
    swap_order,
    swap_shapes,
    used_share,
)
from models.diffusion import get_schedule
from models.diffusion.process import add_noise, prediction_target, to_x0
from models.dit.config import get_preset
from models.dit.model import DiT
from models.shapes import compose_caption, parse_caption
from models.text_encoder import HashedWordEncoder

TINY = get_preset("tiny")


def perturbed(config, seed: int = 0) -> DiT:
    """A DiT of ``config`` with seeded weights, all moved off their initial values."""
    torch.manual_seed(seed)
    model = DiT(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    return model.eval()


def test_swap_order_exchanges_the_phrases_of_a_relation():
    parsed = parse_caption("a small red circle to the left of a blue square")
    swapped = compose_caption(swap_order(parsed))
    assert swapped == "a blue square to the left of a small red circle"
    assert swap_order(swap_order(parsed)) == parsed


def test_swap_shapes_exchanges_shapes_and_keeps_the_rest():
    parsed = parse_caption("a large red circle, a blue square and a white triangle")
    swapped = compose_caption(swap_shapes(parsed))
    assert swapped == "a large red square, a blue circle and a white triangle"


@pytest.mark.parametrize(
    "caption,swap,match",
    [
        ("a red circle and a blue square", swap_order, "relation"),
        ("a red circle", swap_shapes, "different shapes"),
        ("a red circle and a blue circle", swap_shapes, "different shapes"),
    ],
)
def test_swaps_reject_captions_without_that_contrast(caption, swap, match):
    with pytest.raises(ValueError, match=match):
        swap(parse_caption(caption))


@pytest.mark.parametrize("prediction", ["v", "epsilon"])
def test_x0_estimate_inverts_the_exact_prediction(prediction):
    alpha_bar = get_schedule("cosine", 1000).double()
    generator = torch.Generator().manual_seed(0)
    x0 = torch.rand(2, 3, 8, 8, generator=generator, dtype=torch.float64) * 2 - 1
    noise = torch.randn(x0.shape, generator=generator, dtype=torch.float64)
    for step in (10, 500, 990):
        ab = alpha_bar[torch.tensor([step, step])]
        x_t = add_noise(x0, noise, ab)
        target = prediction_target(x0, noise, ab, prediction)
        torch.testing.assert_close(to_x0(target, x_t, ab, prediction), x0)


def probe(model: DiT, captions: list[str], contrasts: list[str]) -> dict[int, dict[str, float]]:
    encoder = HashedWordEncoder(TINY.text_dim)
    x0 = torch.rand(len(captions), 3, 32, 32, generator=torch.Generator().manual_seed(1)) * 2 - 1
    conditions = {
        "true": encoder.encode(captions),
        "contrast": encoder.encode(contrasts),
        "null": model.null_condition(len(captions)),
    }
    alpha_bar = get_schedule(TINY.schedule, TINY.num_timesteps)
    return denoising_errors(
        model, x0, conditions, alpha_bar, [900, 300], generator=torch.Generator().manual_seed(2)
    )


ORDER = (["red circle left of blue square"], ["blue square left of red circle"])


def test_a_model_blind_to_word_order_uses_none_of_it():
    errors = probe(perturbed(TINY), *ORDER)
    assert set(errors) == {900, 300}
    for row in errors.values():
        assert row["contrast"] == pytest.approx(row["true"], rel=1e-6)
        assert row["null"] != pytest.approx(row["true"], rel=1e-5)  # the caption counts


def test_text_positions_make_the_order_contrast_count():
    model = perturbed(dataclasses.replace(TINY, text_positions=8))
    with torch.no_grad():  # positions as large as the projected tokens, so order shows
        model.text_position.normal_(generator=torch.Generator().manual_seed(3))
    errors = probe(model, *ORDER)
    assert any(row["contrast"] != pytest.approx(row["true"], rel=1e-3) for row in errors.values())


def test_used_share_is_the_contrast_share_of_the_caption_gain():
    assert used_share({"true": 1.0, "contrast": 1.5, "null": 2.0}, "contrast") == 0.5
    assert used_share({"true": 1.0, "contrast": 1.0, "null": 2.0}, "contrast") == 0.0
    assert math.isnan(used_share({"true": 1.0, "contrast": 1.2, "null": 1.0}, "contrast"))

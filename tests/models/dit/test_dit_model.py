"""The DiT network: patches, timestep features, zero-init policy, conditioning, config."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import norms
from models.dit.config import PRESETS, TOKEN_NORMS, DiTConfig, get_preset
from models.dit.model import (
    DiT,
    patchify,
    sincos_position_embedding,
    timestep_embedding,
    unpatchify,
)
from models.text_encoder import HashedWordEncoder

TINY = get_preset("tiny")


def perturbed(model: DiT, std: float = 0.05, seed: int = 0) -> DiT:
    """Move every weight off its initial value (zero-initialised ones included)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * std)
    return model


@pytest.fixture
def encoder():
    return HashedWordEncoder(TINY.text_dim)


@given(
    batch=st.integers(1, 3),
    channels=st.integers(1, 4),
    grid=st.integers(1, 4),
    patch=st.sampled_from([1, 2, 4]),
)
@settings(max_examples=25, deadline=None)
def test_unpatchify_inverts_patchify(batch, channels, grid, patch):
    images = torch.randn(batch, channels, grid * patch, grid * patch)
    tokens = patchify(images, patch)
    assert tokens.shape == (batch, grid * grid, patch * patch * channels)
    assert torch.equal(unpatchify(tokens, patch, channels), images)


def test_patch_tokens_are_the_pixels_of_each_patch_row_major():
    images = torch.randn(2, 3, 8, 8)
    tokens = patchify(images, 4)
    # token 1 is the top-right patch; its features are (p, p, C) flattened
    expected = images[:, :, 0:4, 4:8].permute(0, 2, 3, 1).reshape(2, -1)
    torch.testing.assert_close(tokens[:, 1], expected)


def test_patchify_rejects_indivisible_sizes():
    with pytest.raises(ValueError, match="divisible"):
        patchify(torch.zeros(1, 3, 10, 10), 4)


def test_timestep_embedding_matches_float64_formula():
    t = torch.tensor([0, 1, 17, 999])
    dim, half = 16, 8
    got = timestep_embedding(t, dim)
    for row, step in enumerate(t.tolist()):
        for i in range(half):
            freq = math.exp(-math.log(10_000) * i / half)
            assert got[row, i].item() == pytest.approx(math.cos(step * freq), abs=1e-5)
            assert got[row, half + i].item() == pytest.approx(math.sin(step * freq), abs=1e-5)


def test_position_embedding_matches_float64_formula():
    grid, dim = 3, 8
    quarter = dim // 4
    got = sincos_position_embedding(grid, dim)
    assert got.shape == (1, grid * grid, dim)
    for token in range(grid * grid):
        row, col = divmod(token, grid)  # row-major, as patchify orders tokens
        expected = []
        for coordinate in (row, col):
            freqs = [10_000 ** (-i / quarter) for i in range(quarter)]
            expected += [math.sin(coordinate * f) for f in freqs]
            expected += [math.cos(coordinate * f) for f in freqs]
        assert got[0, token].tolist() == pytest.approx(expected, abs=1e-6)


def test_position_embedding_tells_every_token_apart():
    table = sincos_position_embedding(8, 128)[0]  # the shapes32 grid and width
    distances = torch.cdist(table, table) + torch.eye(64) * 1e9
    assert distances.min() > 0.1


def test_position_embedding_is_fixed_and_not_stored():
    model = DiT(TINY)
    assert "pos_embed" not in dict(model.named_parameters())
    assert "pos_embed" not in model.state_dict()
    torch.testing.assert_close(
        model.pos_embed, sincos_position_embedding(TINY.grid_size, TINY.width)
    )


def test_prediction_depends_on_where_a_patch_is(encoder):
    """Moving one bright patch moves the prediction's response: positions are seen."""
    model = perturbed(DiT(TINY)).eval()
    config = TINY
    cond = encoder.encode(["a red circle"] * 2)
    x = torch.zeros(2, 3, config.image_size, config.image_size)
    p = config.patch_size
    x[0, :, :p, :p] = 1.0  # top-left patch
    x[1, :, -p:, -p:] = 1.0  # bottom-right patch
    shifted = torch.roll(x[0], shifts=(config.image_size - p, config.image_size - p), dims=(1, 2))
    assert torch.equal(shifted, x[1])
    with torch.no_grad():
        out = model(x, torch.full((2,), 500), cond)
    rolled = torch.roll(out[0], shifts=(config.image_size - p,) * 2, dims=(1, 2))
    assert not torch.allclose(rolled, out[1], atol=1e-4)  # not translation-equivariant


def test_timestep_embedding_pads_odd_widths():
    got = timestep_embedding(torch.tensor([3]), 7)
    assert got.shape == (1, 7) and got[0, -1] == 0


def test_forward_shape(encoder):
    model = DiT(TINY)
    x = torch.randn(3, 3, 32, 32)
    cond = encoder.encode(["a red circle", "two blue squares on the left", "a"])
    assert model(x, torch.tensor([0, 10, 999]), cond).shape == x.shape


def test_block_is_identity_at_initialisation():
    """DiT.initialize_weights zeroes every gate and the cross-attention output."""
    block = DiT(TINY).blocks[0]
    x = torch.randn(2, TINY.num_tokens, TINY.width)
    context = torch.randn(2, 5, TINY.width)
    mask = torch.ones(2, 5, dtype=torch.bool)
    assert torch.equal(block(x, torch.randn(2, TINY.width), context, mask), x)


def test_whole_model_predicts_zero_at_initialisation(encoder):
    model = DiT(TINY)
    out = model(torch.randn(2, 3, 32, 32), torch.tensor([5, 500]), encoder.encode(["a", "b"]))
    assert torch.count_nonzero(out) == 0


def test_block_is_not_identity_once_trained():
    block = perturbed(DiT(TINY)).blocks[0]
    x = torch.randn(2, TINY.num_tokens, TINY.width)
    out = block(
        x,
        torch.randn(2, TINY.width),
        torch.randn(2, 3, TINY.width),
        torch.ones(2, 3, dtype=torch.bool),
    )
    assert not torch.allclose(out, x)


def test_padding_tokens_do_not_change_the_prediction(encoder):
    model = perturbed(DiT(TINY))
    x, t = torch.randn(1, 3, 32, 32), torch.tensor([300])
    short = encoder.encode(["a red circle"])
    padded = encoder.encode(["a red circle", "a big green square to the left of a circle"])
    padded = type(padded)(*(part[:1] for part in padded))  # first row, padded to 10 tokens
    assert padded.tokens.shape[1] > short.tokens.shape[1]
    torch.testing.assert_close(model(x, t, short), model(x, t, padded), rtol=1e-5, atol=1e-6)


def test_prediction_depends_on_token_order_through_cross_attention(encoder):
    """Same words, different binding: the pooled mean is identical, the tokens are not."""
    model = perturbed(DiT(TINY))
    a = encoder.encode(["red circle blue square"])
    b = encoder.encode(["blue circle red square"])
    torch.testing.assert_close(a.pooled, b.pooled)
    x, t = torch.randn(1, 3, 32, 32), torch.tensor([300])
    assert not torch.allclose(model(x, t, a), model(x, t, b))
    no_cross = perturbed(DiT(dataclasses.replace(TINY, cross_attention=False)))
    torch.testing.assert_close(no_cross(x, t, a), no_cross(x, t, b))


def test_only_text_positions_let_cross_attention_see_word_order(encoder):
    """Attention is blind to the order of its keys: with per-word token states (no
    context, like the hashed-word encoder) "A left of B" and "B left of A" are the same set of
    tokens. Learned text positions tell them apart."""
    a = encoder.encode(["red circle left of blue square"])
    b = encoder.encode(["blue square left of red circle"])
    torch.testing.assert_close(a.pooled, b.pooled)
    x, t = torch.randn(1, 3, 32, 32), torch.tensor([300])
    blind = perturbed(DiT(TINY))
    torch.testing.assert_close(blind(x, t, a), blind(x, t, b), rtol=1e-5, atol=1e-6)
    seeing = perturbed(DiT(dataclasses.replace(TINY, text_positions=8)))
    with torch.no_grad():  # positions on the scale of the projected tokens
        seeing.text_position.normal_(generator=torch.Generator().manual_seed(1))
    assert not torch.allclose(seeing(x, t, a), seeing(x, t, b), rtol=1e-3, atol=1e-4)


def test_text_positions_start_at_zero_so_a_model_keeps_its_predictions(encoder):
    plain = perturbed(DiT(TINY))
    extended = DiT(dataclasses.replace(TINY, text_positions=8))
    missing, unexpected = extended.load_state_dict(plain.state_dict(), strict=False)
    assert missing == ["text_position"] and unexpected == []
    assert torch.count_nonzero(extended.text_position) == 0
    cond = encoder.encode(["a red circle to the left of a blue square"])
    x, t = torch.randn(1, 3, 32, 32), torch.tensor([500])
    torch.testing.assert_close(extended(x, t, cond), plain(x, t, cond))


def test_tokens_past_the_position_table_share_its_last_row(encoder):
    model = perturbed(DiT(dataclasses.replace(TINY, text_positions=3)))
    tokens = encoder.encode(["one two three four five"]).tokens  # 5 tokens
    context = model.text_context(tokens)
    projected = model.text_tokens(tokens)
    expected = projected + model.text_position[torch.tensor([0, 1, 2, 2, 2])]
    torch.testing.assert_close(context, expected)


def test_with_null_swaps_only_the_dropped_items(encoder):
    model = perturbed(DiT(TINY))
    cond = encoder.encode(["a red circle", "two blue squares"])
    mixed = model.with_null(cond, torch.tensor([True, False]))
    null = model.null_condition(1)
    torch.testing.assert_close(mixed.pooled[1], cond.pooled[1])
    torch.testing.assert_close(mixed.pooled[0], null.pooled[0])
    assert mixed.mask[0].tolist() == [True] + [False] * (cond.mask.shape[1] - 1)
    x, t = torch.randn(2, 3, 32, 32), torch.tensor([100, 100])
    out = model(x, t, mixed)
    torch.testing.assert_close(out[:1], model(x[:1], t[:1], null), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        out[1:], model(x[1:], t[1:], type(cond)(*(p[1:] for p in cond))), rtol=1e-5, atol=1e-6
    )


def test_null_condition_is_learned():
    model = DiT(TINY)
    names = {name for name, _ in model.named_parameters()}
    assert {"null_pooled", "null_token"} <= names


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("patch_size", 5, "divisible"),
        ("num_heads", 3, "divisible"),
        ("depth", 0, "depth"),
        ("mlp_ratio", 0.0, "mlp_ratio"),
        ("text_positions", -1, "text_positions"),
        ("norm", "batch", "norm"),
        ("norm", "no-such-norm", "norm"),
    ],
)
def test_config_rejects_bad_values(field, value, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(DiTConfig(), **{field: value})


def test_text_positions_need_cross_attention():
    with pytest.raises(ValueError, match="cross_attention"):
        DiTConfig(cross_attention=False, text_positions=4)


def test_config_rejects_a_width_the_position_embedding_cannot_split():
    with pytest.raises(ValueError, match="divisible by 4"):
        DiTConfig(width=6, num_heads=1)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_config_json_round_trip(name):
    config = get_preset(name)
    assert DiTConfig.from_json(config.to_json()) == config


def test_a_config_stored_before_the_norm_field_builds_the_layer_norm():
    stored = json.loads(TINY.to_json())
    del stored["norm"]
    assert DiTConfig.from_json(json.dumps(stored)).norm == "layer"


def test_the_default_token_norm_has_torch_layer_norms_parameters_and_values():
    """The checkpoints' layout: ``norms.LayerNorm`` with the ``weight``/``bias`` of
    ``nn.LayerNorm`` and its outputs (eps 1e-6 before cross-attention, 1e-5 on text)."""
    model = perturbed(DiT(TINY))
    for built, eps in ((model.blocks[0].cross_norm, 1e-6), (model.text_tokens[0], 1e-5)):
        assert isinstance(built, norms.LayerNorm)
        reference = nn.LayerNorm(built.normalized_shape, eps=eps)
        reference.load_state_dict(built.state_dict())  # the same parameter names
        x = torch.randn(2, 5, *built.normalized_shape)
        torch.testing.assert_close(built(x), reference(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", [n for n in TOKEN_NORMS if n != "layer"])
def test_a_dit_with_another_token_norm_builds_trains_and_runs(encoder, name):
    model = perturbed(DiT(dataclasses.replace(TINY, norm=name)))
    kind = type(norms.build(name, 4))
    assert type(model.blocks[0].cross_norm) is kind and type(model.text_tokens[0]) is kind
    x = torch.randn(2, 3, 32, 32)
    out = model(x, torch.tensor([3, 700]), encoder.encode(["a red circle", "two squares"]))
    assert out.shape == x.shape and torch.isfinite(out).all()
    out.square().mean().backward()
    assert model.blocks[0].cross_norm.weight.grad is not None


def test_config_from_json_rejects_unknown_fields():
    with pytest.raises(ValueError, match="unknown"):
        DiTConfig.from_json('{"width": 64, "colour": 1}')


def test_unknown_preset_lists_names():
    with pytest.raises(ValueError, match="shapes32"):
        get_preset("huge")


def test_default_preset_fits_the_checkpoint_budget():
    params = DiT(get_preset("shapes32")).num_parameters()
    assert params * 4 < 25e6  # float32 safetensors under 25 MB

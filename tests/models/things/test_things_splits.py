"""The held-out split: paraphrases never trained on, colour pairs never drawn in training."""

import re

import numpy as np

from models.things import (
    HELDOUT_PARAPHRASES,
    THING_COLOURS,
    colour_heldout,
    heldout_things,
    sample_scene,
    things,
    training_phrasings,
)
from models.things.splits import all_heldout_phrases


def _contains(text: str, phrase: str) -> bool:
    return re.search(rf"(?<![\w'-]){re.escape(phrase)}(?![\w'-])", text) is not None


def test_held_out_paraphrases_cover_150_things_and_no_name():
    assert len(heldout_things()) >= 150
    phrases = all_heldout_phrases()
    assert len(set(phrases)) == len(phrases)
    any_phrase = re.compile(r"(?<![\w'-])(?:" + "|".join(map(re.escape, phrases)) + r")(?![\w'-])")
    for t in things():
        assert training_phrasings(t)[0] == t.name  # every name stays trainable
        for kept in training_phrasings(t):
            assert any_phrase.search(kept) is None, kept
    # the combined pattern finds what the single ones find
    assert any_phrase.search("a picture of a kitty") and _contains("two kitty cats", "kitty")


def test_held_out_paraphrases_never_appear_in_training_captions(emoji_font):
    rng = np.random.default_rng(1)
    captions = [sample_scene(rng, "train", shapes_share=0.0).caption for _ in range(4000)]
    text = "\n".join(captions)
    leaked = [p for p in all_heldout_phrases() if _contains(text, p)]
    assert leaked == []
    # and the same check catches them in the held-out split
    rng = np.random.default_rng(1)
    held = "\n".join(sample_scene(rng, "heldout", shapes_share=0.0).caption for _ in range(400))
    assert sum(_contains(held, p) for p in all_heldout_phrases()) > 50


def test_held_out_colour_pairs_are_never_drawn_in_training(emoji_font):
    rng = np.random.default_rng(2)
    coloured = 0
    for _ in range(3000):
        scene = sample_scene(rng, "train", shapes_share=0.0)
        for obj in scene.objects:
            if obj.colour is not None:
                coloured += 1
                assert not colour_heldout(obj.thing, obj.colour)
    assert coloured > 300
    pairs = [(t.key, c) for t in things() for c in THING_COLOURS]
    share = sum(colour_heldout(k, c) for k, c in pairs) / len(pairs)
    assert 0.08 < share < 0.17  # about one in eight


def test_every_held_out_caption_holds_out_its_first_object(emoji_font):
    rng = np.random.default_rng(3)
    for _ in range(300):
        scene = sample_scene(rng, "heldout", shapes_share=0.0)
        first = scene.parsed.objects[0]
        paraphrase = first.noun in HELDOUT_PARAPHRASES.get(first.thing, ())
        colour = first.colour is not None and colour_heldout(first.thing, first.colour)
        assert paraphrase or colour, scene.caption

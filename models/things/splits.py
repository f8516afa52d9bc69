"""Phrasings of each thing, and the held-out split: paraphrases and colour combinations.

**Training phrasings** of a thing are its name and its aliases
(:class:`~models.things.vocab.Thing`), minus any that contains a held-out paraphrase as
whole words. Captions frame them with the templates of :mod:`models.things.captions`
("a picture of a rocket").

**Held-out paraphrases** (:data:`HELDOUT_PARAPHRASES`, read from
``heldout_paraphrases.json`` beside this module) were written by hand, before any
model was trained on this data: synonyms and everyday words a new user might type for a
thing ("kitty" for the cat face, "puppy" for the dog, "spaceship" for the rocket,
"aubergine" for the eggplant). None of them is, as whole words, part of any thing's name
(so no name is lost), and no training caption ever contains one (training phrasings that
would are dropped). They measure whether the text encoder carries a new word to the
thing it means. Size words ("big", "tiny"), colour words and counts are kept out of them,
since the layout reads those.

**Held-out colour combinations.** A colour variant ``(thing, colour)`` is held out when
``crc32("<key>/<colour>") % 8 == 0``: about one in eight, decided per pair, so every
colour is still trained with most things and every colourable thing with most colours;
the ``"train"`` split never draws a held-out pair.
"""

from __future__ import annotations

import json
import re
import zlib
from functools import cache, lru_cache
from pathlib import Path

from models.things.render import THING_COLOURS
from models.things.vocab import Thing, thing_keys, things_by_key

SPLITS: tuple[str, ...] = ("train", "heldout")
COLOUR_HOLDOUT_MODULUS = 8

#: The file of held-out paraphrases: ``{"_about": ..., group: {thing key: [phrase, ...]}}``.
HELDOUT_PARAPHRASES_PATH = Path(__file__).with_name("heldout_paraphrases.json")


def _read_heldout_paraphrases(path: Path) -> dict[str, tuple[str, ...]]:
    """Thing key -> its held-out paraphrases, in the file's order; the file groups the
    keys by kind of thing ("food and drink", "animals", ...) for its readers only."""
    groups = json.loads(path.read_text(encoding="utf-8"))
    groups.pop("_about", None)
    table: dict[str, tuple[str, ...]] = {}
    for group in groups.values():
        for key, phrases in group.items():
            if key in table:
                raise ValueError(f"{path.name}: {key!r} stands in two groups")
            table[key] = tuple(phrases)
    return table


#: Thing key -> paraphrases never used in training (written before training).
HELDOUT_PARAPHRASES: dict[str, tuple[str, ...]] = _read_heldout_paraphrases(
    HELDOUT_PARAPHRASES_PATH
)


def _contains(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` as whole words."""
    return re.search(rf"(?<![\w'-]){re.escape(phrase)}(?![\w'-])", text) is not None


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    return split


@lru_cache(maxsize=1)
def all_heldout_phrases() -> tuple[str, ...]:
    """Every held-out paraphrase, in dictionary order."""
    return tuple(p for phrases in HELDOUT_PARAPHRASES.values() for p in phrases)


@cache
def training_phrasings(thing: Thing) -> tuple[str, ...]:
    """The name and aliases of ``thing`` that contain no held-out paraphrase.

    The name always survives (no held-out paraphrase is part of a name).
    """
    return tuple(
        p
        for p in (thing.name, *thing.aliases)
        if not any(_contains(p, h) for h in all_heldout_phrases())
    )


def heldout_phrasings(thing: Thing) -> tuple[str, ...]:
    """The held-out paraphrases of ``thing`` (empty for most things)."""
    return HELDOUT_PARAPHRASES.get(thing.key, ())


def colour_free(phrasings: tuple[str, ...]) -> tuple[str, ...]:
    """The phrasings that name no colour (a colour variant cannot be "a blue red apple")."""
    colour_words = {*THING_COLOURS, "black", "white", "brown", "grey", "gray", "light"}
    return tuple(p for p in phrasings if not colour_words & set(p.split()))


def colour_heldout(key: str, colour: str) -> bool:
    """Whether the colour variant ``(key, colour)`` is held out from training."""
    return zlib.crc32(f"{key}/{colour}".encode()) % COLOUR_HOLDOUT_MODULUS == 0


@lru_cache(maxsize=1)
def heldout_things() -> tuple[str, ...]:
    """Keys with held-out paraphrases, in vocabulary order (checked against the vocabulary)."""
    table = things_by_key()
    unknown = sorted(set(HELDOUT_PARAPHRASES) - set(table))
    if unknown:
        raise KeyError(f"held-out paraphrases name unknown things: {unknown}")
    return tuple(k for k in thing_keys() if k in HELDOUT_PARAPHRASES)

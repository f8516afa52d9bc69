"""Held-out paraphrase templates: the evaluation captions of ``dit_eval.py --paraphrase``.

They caption the same held-out scenes as ``models.shapes.eval_prompts`` in free phrasing,
the way a new user might type them: synonyms (tiny, huge, underneath, on top of, upper
left, middle), numerals and number words, "a pair of", reordered clauses, fronted
relations, "beside ... with the circle on the left", several sentences, capitals and
punctuation. Each paraphrase states exactly the constraints of its grammar caption (an
inverse relation, "B to the right of A" for "A to the left of B", states the same one).

Written once, before the prompt parser (``models/shapes/understand.py``), and never used
in its development, tests or tuning: the parser is developed against a different set of
paraphrases (``tests/models/shapes/test_shapes_understand.py``). Nothing outside this benchmark
may import this module; changing it after the parser exists would void the measure.
"""

from __future__ import annotations

import numpy as np

from models.shapes.captions import ObjectSpec, ParsedCaption

_SIZE_WORDS = {"small": ("tiny", "little", "small"), "large": ("big", "huge", "large")}
_COUNT_WORDS = {2: ("2", "two", "a pair of"), 3: ("3", "three")}
_PLACE_WORDS = {
    "top left": ("in the upper left", "in the top-left corner", "at the top left"),
    "top": ("at the top", "at the top centre", "in the top middle"),
    "top right": ("in the upper right", "in the top-right corner", "at the top right"),
    "left": ("on the left", "on the left side", "at the left"),
    "center": ("in the middle", "in the centre", "at the center"),
    "right": ("on the right", "on the right side", "at the right"),
    "bottom left": ("in the lower left", "in the bottom-left corner", "at the bottom left"),
    "bottom": ("at the bottom", "at the bottom centre", "in the bottom middle"),
    "bottom right": ("in the lower right", "in the bottom-right corner", "at the bottom right"),
}
#: For "A <relation> B": phrasings with A first, and phrasings of the inverse with B first.
_RELATION_WORDS = {
    "left of": (("to the left of", "left of"), ("to the right of", "right of")),
    "right of": (("to the right of", "right of"), ("to the left of", "left of")),
    "above": (("above", "over", "on top of"), ("below", "underneath", "beneath", "under")),
    "below": (("below", "underneath", "beneath", "under"), ("above", "over", "on top of")),
}
#: The side word of "A beside B, with A on the <side>" (horizontal relations only).
_SIDE = {"left of": "left", "right of": "right"}
#: "B with A <pronoun phrase>": where A sits relative to B.
_ITS = {
    "left of": ("to its left", "on its left"),
    "right of": ("to its right", "on its right"),
    "above": ("above it", "on top of it"),
    "below": ("below it", "under it", "beneath it"),
}


def _pick(rng: np.random.Generator, options):
    return options[rng.integers(len(options))]


def _noun_phrase(spec: ObjectSpec, rng: np.random.Generator, *, place: bool = True) -> str:
    """A free phrasing of one object phrase (without its place when ``place`` is False)."""
    size = _pick(rng, _SIZE_WORDS[spec.size]) if spec.size else None
    adjectives = [w for w in (size, spec.colour) if w]
    if len(adjectives) == 2 and rng.random() < 0.15:
        adjectives.reverse()  # "a red big circle"
    noun = spec.thing + ("s" if spec.count > 1 else "")
    if spec.count > 1:
        determiner = _pick(rng, _COUNT_WORDS[spec.count])
    else:
        determiner = _pick(rng, ("a", "a", "one", "a single"))
        if determiner == "a" and adjectives[0][0] in "aeiou":
            determiner = "an"
    phrase = " ".join([determiner, *adjectives, noun])
    if place and spec.position is not None:
        phrase += " " + _pick(rng, _PLACE_WORDS[spec.position])
    return phrase


def _reference(spec: ObjectSpec, other: ObjectSpec) -> str:
    """How a later clause names ``spec``: "the circle", or "the red circle" when the
    other object is also a circle."""
    return f"the {spec.thing}" if spec.thing != other.thing else f"the {spec.colour} {spec.thing}"


def _sentence(text: str, rng: np.random.Generator) -> str:
    text = text[0].upper() + text[1:] if rng.random() < 0.5 else text
    return text + _pick(rng, ("", ".", ".", "!"))


def _single(spec: ObjectSpec, rng: np.random.Generator) -> str:
    if spec.position is None:
        phrase = _noun_phrase(spec, rng)
        return _pick(rng, (phrase, f"draw {phrase}", f"there is {phrase}", f"just {phrase}"))
    bare = _noun_phrase(spec, rng, place=False)
    place = _pick(rng, _PLACE_WORDS[spec.position])
    short = place.removeprefix("in the ").removeprefix("at the ")
    return _pick(
        rng, (f"{bare} {place}", f"{place}, {bare}", f"{bare}, {short}", f"{bare}. it is {place}")
    )


def _join(phrases: list[str], rng: np.random.Generator) -> str:
    if len(phrases) == 1:
        return _pick(rng, ("{}", "draw {}", "there are {}", "I want {}")).format(phrases[0])
    frame = rng.integers(4)
    if frame == 0:
        return ", ".join(phrases[:-1]) + _pick(rng, (" and ", ", and ", " plus ")) + phrases[-1]
    if frame == 1:
        return " & ".join(phrases)
    if frame == 2:
        return ". ".join(f"there is {p}" for p in phrases)
    return "; ".join(phrases)


def _several(specs: tuple[ObjectSpec, ...], rng: np.random.Generator) -> str:
    order = rng.permutation(len(specs))
    return _join([_noun_phrase(specs[i], rng) for i in order], rng)


def _relation(parsed: ParsedCaption, rng: np.random.Generator) -> str:
    a, b = parsed.objects
    relation = parsed.relation
    forward, inverse = _RELATION_WORDS[relation]
    frame = rng.integers(6)
    if frame == 0:
        return f"{_noun_phrase(a, rng)} {_pick(rng, forward)} {_noun_phrase(b, rng)}"
    if frame == 1:
        return f"{_noun_phrase(b, rng)} {_pick(rng, inverse)} {_noun_phrase(a, rng)}"
    if frame == 2:
        return f"{_pick(rng, forward)} {_noun_phrase(b, rng)}, {_noun_phrase(a, rng)}"
    if frame == 3:
        return f"{_noun_phrase(b, rng)} with {_noun_phrase(a, rng)} {_pick(rng, _ITS[relation])}"
    if frame == 4 and relation in _SIDE:
        near = _pick(rng, ("next to", "beside"))
        return (
            f"{_noun_phrase(a, rng)} {near} {_noun_phrase(b, rng)}, "
            f"with {_reference(a, b)} on the {_SIDE[relation]}"
        )
    first, second = _noun_phrase(a, rng), _noun_phrase(b, rng)
    return f"there is {first}. {_reference(a, b)} is {_pick(rng, forward)} {second}"


def heldout_paraphrase(parsed: ParsedCaption, rng: np.random.Generator) -> str:
    """One free phrasing of ``parsed`` drawn with ``rng``."""
    if parsed.relation is not None:
        text = _relation(parsed, rng)
    elif len(parsed.objects) == 1 and parsed.objects[0].count == 1:
        text = _single(parsed.objects[0], rng)
    else:
        text = _several(parsed.objects, rng)
    return _sentence(text, rng)


def heldout_paraphrases(captions: list[str], seed: int = 0) -> list[str]:
    """The paraphrase of each grammar caption, the same for the same ``(captions, seed)``."""
    from models.shapes import parse_caption

    return [
        heldout_paraphrase(parse_caption(c), np.random.default_rng([seed, 0x9A4A, i]))
        for i, c in enumerate(captions)
    ]

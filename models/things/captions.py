"""Captions of things scenes, in the shapes grammar's layout words.

A caption is built from object phrases::

    phrase := ("a" | "an" | "two" | "three") [size] [colour] noun["s"] [" " place]

where ``size`` is "small" or "large", ``colour`` one of the thing colours
(:data:`~models.things.render.THING_COLOURS`), ``noun`` a phrasing of the thing (its
name, an alias: "red apple", "rocket", "bike"), plural by :func:`plural`, and ``place``
the shapes grammar's places ("in the top left", "at the top", ..., ``_PLACE_TEXT`` of
:mod:`models.shapes.captions`). Phrases combine as in the shapes world:

- one object, in a frame: ``"a rocket"``, ``"a picture of a small blue apple"``
- several: ``"a cat and a rocket"``, ``"a cat, a dog and a pizza"``
- counts: ``"two cats"``, ``"three apples and a dog"`` (at most 4 objects in all)
- a relation: ``"a rocket to the left of a pizza"`` (also "to the right of", "above",
  "below"), relating the first object to the second.

:func:`compose_caption` is the one place captions are written, so a prompt reader can be
tested against it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from models.shapes.captions import _PLACE_TEXT, _RELATION_TEXT, RELATIONS
from models.shapes.vocab import POSITIONS, SIZES
from models.things.render import THING_COLOURS

#: Frames of a one-object caption; ``{}`` is the object phrase.
FRAMES: tuple[str, ...] = (
    "{}",
    "a picture of {}",
    "an image of {}",
    "a drawing of {}",
    "an icon of {}",
)
MAX_OBJECTS = 4
_NUMBER_TEXT = {2: "two", 3: "three"}
_IRREGULAR = {
    "person": "people",
    "man": "men",
    "woman": "women",
    "child": "children",
    "mouse": "mice",
    "foot": "feet",
    "tooth": "teeth",
    "goose": "geese",
    "fish": "fish",
    "sheep": "sheep",
    "deer": "deer",
    "bison": "bison",
    "moose": "moose",
    "shrimp": "shrimp",
    "ox": "oxen",
    "leaf": "leaves",
    "knife": "knives",
    "wolf": "wolves",
    "sushi": "sushi",
}
_PLURAL_ONLY = frozenset({"people", "men", "women", "children", "feet", "teeth", "mice"})
#: Words that end the head of a noun phrase ("face with tears of joy" -> "face").
_HEAD_END = frozenset({"with", "of", "in", "on", "at", "for", "without", "behind", "over"})
_AN_EXCEPTIONS = ("uni", "use", "usu", "eu", "one", "ufo")
_AN_SILENT_H = ("hour", "honest", "honou")


@dataclass(frozen=True)
class ThingSpec:
    """What a caption says about one kind of thing.

    Args:
        thing: the thing's key (:func:`~models.things.vocab.thing`).
        noun: the singular phrasing the caption uses for it ("rocket", "kitty").
        count: 1 for "a"/"an", 2 or 3 for a stated number.
        size: ``"small"``, ``"large"`` or ``None`` when unstated.
        colour: a colour of :data:`THING_COLOURS` (a hue-shifted variant) or ``None`` for
            the thing's own colours.
        position: a grid position name or ``None`` (only with ``count == 1``).
    """

    thing: str
    noun: str
    count: int = 1
    size: str | None = None
    colour: str | None = None
    position: str | None = None

    def __post_init__(self) -> None:
        if not self.noun.strip():
            raise ValueError("the noun must not be empty")
        if self.count not in (1, 2, 3):
            raise ValueError(f"count must be 1, 2 or 3, got {self.count}")
        if self.size is not None and self.size not in SIZES:
            raise ValueError(f"unknown size {self.size!r}; expected one of {SIZES} or None")
        if self.colour is not None and self.colour not in THING_COLOURS:
            raise ValueError(f"unknown colour {self.colour!r}; expected {THING_COLOURS} or None")
        if self.position is not None:
            if self.position not in POSITIONS:
                raise ValueError(f"unknown position {self.position!r}; expected {POSITIONS}")
            if self.count != 1:
                raise ValueError("a position can only be stated for a single object")


@dataclass(frozen=True)
class ThingCaption:
    """The constraints a things caption states.

    ``objects`` name distinct things; ``relation`` (one of the shapes grammar's
    ``RELATIONS`` or ``None``) relates ``objects[0]`` to ``objects[1]``; ``frame`` is one
    of :data:`FRAMES` (only a one-object caption has a frame other than ``"{}"``).
    """

    objects: tuple[ThingSpec, ...]
    relation: str | None = None
    frame: str = "{}"

    def __post_init__(self) -> None:
        if not 1 <= len(self.objects) <= 3:
            raise ValueError(f"a caption names 1 to 3 kinds of thing, got {len(self.objects)}")
        keys = [spec.thing for spec in self.objects]
        if len(set(keys)) != len(keys):
            raise ValueError(f"object phrases must name distinct things: {keys}")
        total = sum(spec.count for spec in self.objects)
        if total > MAX_OBJECTS:
            raise ValueError(f"a caption describes at most {MAX_OBJECTS} objects, got {total}")
        if self.frame not in FRAMES:
            raise ValueError(f"unknown frame {self.frame!r}; expected one of {FRAMES}")
        if self.frame != "{}" and total != 1:
            raise ValueError("only a one-object caption has a frame")
        if self.relation is not None:
            if self.relation not in RELATIONS:
                raise ValueError(f"unknown relation {self.relation!r}; expected {RELATIONS}")
            if len(self.objects) != 2 or any(spec.count != 1 for spec in self.objects):
                raise ValueError("a relation relates exactly two single objects")
            if any(spec.position is not None for spec in self.objects):
                raise ValueError("a relation caption cannot also fix grid positions")

    @property
    def total(self) -> int:
        """How many objects the caption describes."""
        return sum(spec.count for spec in self.objects)


def _plural_word(word: str) -> str:
    if already_plural(word):
        return word
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if re.search(r"(s|x|z|ch|sh)$", word):
        return word + "es"
    if re.search(r"[^aeiou]y$", word):
        return word[:-1] + "ies"
    return word + "s"


def already_plural(word: str) -> bool:
    """Whether a head word is plural already ("scissors", "jeans", "people")."""
    return word in _PLURAL_ONLY or (
        len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is"))
    )


def plural(noun: str) -> str:
    """The plural of a noun phrase, inflecting its head: ``"face with tears of joy"`` ->
    ``"faces with tears of joy"``, ``"person running"`` -> ``"people running"``,
    ``"red apple"`` -> ``"red apples"``."""
    words = noun.split()
    end = next((i for i, w in enumerate(words) if i > 0 and w in _HEAD_END), len(words))
    head = next((i for i in range(end) if words[i] in _IRREGULAR), end - 1)
    words[head] = _plural_word(words[head])
    return " ".join(words)


def indefinite(phrase: str) -> str:
    """``"a"`` or ``"an"`` for ``phrase`` by its sound, as far as spelling tells."""
    word = phrase.lower()
    if word.startswith(_AN_SILENT_H):
        return "an"
    if word[:1] in "aeiou" and not word.startswith(_AN_EXCEPTIONS):
        return "an"
    return "a"


def object_phrase(spec: ThingSpec) -> str:
    """``ThingSpec("rocket", "rocket", size="small", colour="blue")`` -> ``"a small blue rocket"``."""
    noun = plural(spec.noun) if spec.count > 1 else spec.noun
    body = " ".join(w for w in (spec.size, spec.colour, noun) if w is not None)
    determiner = _NUMBER_TEXT[spec.count] if spec.count > 1 else indefinite(body)
    phrase = f"{determiner} {body}"
    if spec.position is not None:
        phrase += " " + _PLACE_TEXT[spec.position]
    return phrase


def compose_caption(caption: ThingCaption) -> str:
    """Write ``caption`` with the templates above."""
    phrases = [object_phrase(spec) for spec in caption.objects]
    if caption.relation is not None:
        return f"{phrases[0]} {_RELATION_TEXT[caption.relation]} {phrases[1]}"
    if len(phrases) == 1:
        return caption.frame.format(phrases[0])
    return ", ".join(phrases[:-1]) + " and " + phrases[-1]

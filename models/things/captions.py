"""Captions of things scenes, in the shapes grammar's layout words.

A caption is built from object phrases::

    phrase := ("a" | "an" | "two" | "three") [size] [colour] noun["s"] [" " place]

where ``size`` is "small" or "large", ``colour`` one of the thing colours
(:data:`~models.things.render.THING_COLOURS`), ``noun`` a phrasing of the thing (its
name, an alias: "red apple", "rocket", "bike"), plural by
:func:`models.shapes.nouns.plural` (its article, too, is the nouns module's), and ``place``
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

from dataclasses import dataclass

from models.shapes.captions import check_objects, check_phrase, joined_phrases, written_phrase
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
        check_phrase(self.count, self.size, self.position)
        if self.colour is not None and self.colour not in THING_COLOURS:
            raise ValueError(f"unknown colour {self.colour!r}; expected {THING_COLOURS} or None")


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
        check_objects([spec.thing for spec in self.objects], "thing", "things", self.relation)
        total = sum(spec.count for spec in self.objects)
        if total > MAX_OBJECTS:
            raise ValueError(f"a caption describes at most {MAX_OBJECTS} objects, got {total}")
        if self.frame not in FRAMES:
            raise ValueError(f"unknown frame {self.frame!r}; expected one of {FRAMES}")
        if self.frame != "{}" and total != 1:
            raise ValueError("only a one-object caption has a frame")
        if self.relation is not None:
            if len(self.objects) != 2 or any(spec.count != 1 for spec in self.objects):
                raise ValueError("a relation relates exactly two single objects")
            if any(spec.position is not None for spec in self.objects):
                raise ValueError("a relation caption cannot also fix grid positions")

    @property
    def total(self) -> int:
        """How many objects the caption describes."""
        return sum(spec.count for spec in self.objects)


def object_phrase(spec: ThingSpec) -> str:
    """``ThingSpec("rocket", "rocket", size="small", colour="blue")`` -> ``"a small blue rocket"``."""
    return written_phrase(spec.noun, spec.count, spec.size, spec.colour, spec.position)


def compose_caption(caption: ThingCaption) -> str:
    """Write ``caption`` with the templates above (the shapes grammar's, in a frame)."""
    phrases = [object_phrase(spec) for spec in caption.objects]
    return caption.frame.format(joined_phrases(phrases, caption.relation))

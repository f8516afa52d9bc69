"""Caption templates and their parser.

Every caption is built from object phrases::

    phrase   := ("a" | "an" | "two" | "three") [size] colour shape["s"] [" " place]
    place    := "in the top left" | "at the top" | "in the top right" | "on the left"
              | "in the center" | "on the right" | "in the bottom left" | "at the bottom"
              | "in the bottom right"

and one of four template families:

- single object: ``"a small red circle in the top left"`` (size and place optional)
- several objects: ``"a blue square and a yellow triangle"``, ``"a, b and c"``
- counts: ``"two green circles"``, ``"two green circles and a red square"``
- relations: ``"a red circle to the left of a white square"`` (also ``to the right of``,
  ``above``, ``below``), comparing the first object with the second.

:func:`parse_caption` inverts :func:`compose_caption` exactly; it is what the scorer checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from models.shapes.vocab import COLOURS, POSITIONS, SHAPES, SIZES

#: The relations, read as "objects[0] <relation> objects[1]".
RELATIONS: tuple[str, ...] = ("left of", "right of", "above", "below")
_RELATION_TEXT = {
    "left of": "to the left of",
    "right of": "to the right of",
    "above": "above",
    "below": "below",
}
_PLACE_TEXT = {
    "top left": "in the top left",
    "top": "at the top",
    "top right": "in the top right",
    "left": "on the left",
    "center": "in the center",
    "right": "on the right",
    "bottom left": "in the bottom left",
    "bottom": "at the bottom",
    "bottom right": "in the bottom right",
}
_NUMBER_TEXT = {2: "two", 3: "three"}
_NUMBER_VALUE = {"a": 1, "an": 1, "two": 2, "three": 3}


@dataclass(frozen=True)
class ObjectSpec:
    """What a caption says about one kind of object.

    Args:
        colour: one of :data:`~models.shapes.vocab.COLOURS`.
        shape: one of :data:`~models.shapes.vocab.SHAPES`.
        count: 1 for "a"/"an" (at least one), 2 or 3 for a stated number (exactly that many).
        size: ``"small"``, ``"large"`` or ``None`` when unstated.
        position: a grid position name or ``None`` when unstated (only with ``count == 1``).
    """

    colour: str
    shape: str
    count: int = 1
    size: str | None = None
    position: str | None = None

    def __post_init__(self) -> None:
        if self.colour not in COLOURS:
            raise ValueError(f"unknown colour {self.colour!r}; expected one of {COLOURS}")
        if self.shape not in SHAPES:
            raise ValueError(f"unknown shape {self.shape!r}; expected one of {SHAPES}")
        if self.count not in (1, 2, 3):
            raise ValueError(f"count must be 1, 2 or 3, got {self.count}")
        if self.size is not None and self.size not in SIZES:
            raise ValueError(f"unknown size {self.size!r}; expected one of {SIZES} or None")
        if self.position is not None:
            if self.position not in POSITIONS:
                raise ValueError(f"unknown position {self.position!r}; expected {POSITIONS}")
            if self.count != 1:
                raise ValueError("a position can only be stated for a single object")

    @property
    def pair(self) -> tuple[str, str]:
        """The ``(colour, shape)`` combination this phrase names."""
        return (self.colour, self.shape)

    @property
    def counted(self) -> bool:
        """Whether the phrase states an exact number ("two", "three")."""
        return self.count > 1


@dataclass(frozen=True)
class ParsedCaption:
    """The constraints a caption states.

    ``objects`` name distinct ``(colour, shape)`` pairs; ``relation`` (one of
    :data:`RELATIONS` or ``None``) relates ``objects[0]`` to ``objects[1]``.
    """

    objects: tuple[ObjectSpec, ...]
    relation: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= len(self.objects) <= 3:
            raise ValueError(f"a caption names 1 to 3 kinds of object, got {len(self.objects)}")
        pairs = [spec.pair for spec in self.objects]
        if len(set(pairs)) != len(pairs):
            raise ValueError(f"object phrases must name distinct colour-shape pairs: {pairs}")
        if self.relation is not None:
            if self.relation not in RELATIONS:
                raise ValueError(f"unknown relation {self.relation!r}; expected {RELATIONS}")
            if len(self.objects) != 2 or any(spec.count != 1 for spec in self.objects):
                raise ValueError("a relation relates exactly two single objects")
            if any(spec.position is not None for spec in self.objects):
                raise ValueError("a relation caption cannot also fix grid positions")
        total = sum(spec.count for spec in self.objects)
        if total > 3:
            raise ValueError(f"a caption describes at most 3 objects, got {total}")


def object_phrase(spec: ObjectSpec) -> str:
    """``ObjectSpec("orange", "triangle", size="small")`` -> ``"a small orange triangle"``."""
    words = [w for w in (spec.size, spec.colour) if w is not None]
    noun = spec.shape + ("s" if spec.count > 1 else "")
    if spec.count > 1:
        determiner = _NUMBER_TEXT[spec.count]
    else:
        determiner = "an" if words[0][0] in "aeiou" else "a"
    phrase = " ".join([determiner, *words, noun])
    if spec.position is not None:
        phrase += " " + _PLACE_TEXT[spec.position]
    return phrase


def compose_caption(parsed: ParsedCaption) -> str:
    """Write the caption of ``parsed`` with the templates above."""
    phrases = [object_phrase(spec) for spec in parsed.objects]
    if parsed.relation is not None:
        return f"{phrases[0]} {_RELATION_TEXT[parsed.relation]} {phrases[1]}"
    if len(phrases) == 1:
        return phrases[0]
    return ", ".join(phrases[:-1]) + " and " + phrases[-1]


_PHRASE = re.compile(
    r"^(?P<det>a|an|two|three) "
    rf"(?:(?P<size>{'|'.join(SIZES)}) )?"
    rf"(?P<colour>{'|'.join(COLOURS)}) "
    rf"(?P<shape>{'|'.join(SHAPES)})(?P<plural>s?)"
    rf"(?: (?P<place>{'|'.join(map(re.escape, _PLACE_TEXT.values()))}))?$"
)
_PLACE_NAME = {text: name for name, text in _PLACE_TEXT.items()}
_RELATION_SPLIT = re.compile(
    r" (" + "|".join(re.escape(text) for text in _RELATION_TEXT.values()) + r") "
)
_RELATION_NAME = {text: name for name, text in _RELATION_TEXT.items()}


def _parse_phrase(phrase: str, caption: str) -> ObjectSpec:
    match = _PHRASE.match(phrase)
    if match is None:
        raise ValueError(f"cannot parse object phrase {phrase!r} in caption {caption!r}")
    count = _NUMBER_VALUE[match["det"]]
    if (count > 1) != bool(match["plural"]):
        raise ValueError(f"number and noun disagree in {phrase!r}")
    place = match["place"]
    return ObjectSpec(
        colour=match["colour"],
        shape=match["shape"],
        count=count,
        size=match["size"],
        position=_PLACE_NAME[place] if place else None,
    )


def parse_caption(caption: str) -> ParsedCaption:
    """Read the constraints a caption states.

    Args:
        caption: a caption in the grammar above (case and surrounding spaces are ignored).

    Returns:
        The :class:`ParsedCaption`; ``compose_caption(parse_caption(c)) == c`` for every
        caption the templates write.

    Raises:
        ValueError: when the caption is outside the grammar.
    """
    text = " ".join(caption.lower().split())
    parts = _RELATION_SPLIT.split(text)
    if len(parts) == 3:
        left, relation_text, right = parts
        specs = (_parse_phrase(left, caption), _parse_phrase(right, caption))
        return ParsedCaption(specs, _RELATION_NAME[relation_text])
    if len(parts) != 1:
        raise ValueError(f"a caption states at most one relation: {caption!r}")
    head, sep, last = text.rpartition(" and ")
    phrases = [*head.split(", "), last] if sep else [text]
    return ParsedCaption(tuple(_parse_phrase(p, caption) for p in phrases))

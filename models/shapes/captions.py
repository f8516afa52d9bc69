"""Caption templates and their parser.

Every caption is built from object phrases::

    phrase   := ("a" | "an" | "two" | "three") [size] [colour] thing[plural] [" " place]
    thing    := word (" " word)*        -- no word of the grammar itself (GRAMMAR_WORDS),
                                           but "orange" may end it (NOUN_COLOURS)
    place    := "in the top left" | "at the top" | "in the top right" | "on the left"
              | "in the center" | "on the right" | "in the bottom left" | "at the bottom"
              | "in the bottom right"

and one of four template families:

- single object: ``"a small red circle in the top left"`` (size and place optional)
- several objects: ``"a blue square and a yellow triangle"``, ``"a, b and c"``
- counts: ``"two green circles"``, ``"two green circles and a red square"``
- relations: ``"a red circle to the left of a white square"`` (also ``to the right of``,
  ``above``, ``below``), comparing the first object with the second; either may be
  counted (``"two blue squares above a green triangle"``).

The **thing** is open: a shape of the shapes world ("circle", "square", "triangle") or any
words naming what to draw ("cat", "grinning cat", "pair of shoes", "purple star"); it is
what the text encoder reads. The colour is optional and is always one of the 8 palette
colours (:data:`~models.shapes.vocab.COLOURS`); any other colour word ("purple") is part
of the thing. A counted thing is written in the plural and stored in the singular
(:mod:`models.shapes.nouns`: "two mice" <-> ``thing="mouse"``).

:func:`parse_caption` inverts :func:`compose_caption` exactly; it is what the scorer checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from models.shapes.nouns import (
    article,
    as_counted,
    countable,
    head_word,
    is_plural,
    plural,
    singular,
)
from models.shapes.vocab import COLOURS, POSITIONS, SIZES

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

#: Words the grammar itself uses to mark counts, sizes, colours, places, relations and
#: lists; a thing holds none of them, so every caption reads back one way.
GRAMMAR_WORDS: frozenset[str] = frozenset(
    [*_NUMBER_VALUE, *SIZES, *COLOURS, "and", "above", "below", "left", "right"]
    + ["top", "bottom", "center", "centre", "middle"]
)
#: Palette colours that are also things; one may be a thing's last word ("an orange",
#: "a green orange"), where no colour can follow it.
NOUN_COLOURS: frozenset[str] = frozenset({"orange"})
_WORD = re.compile(r"[a-z]+(?:['-][a-z]+)*")


def thing_problem(thing: str) -> str | None:
    """Why ``thing`` cannot name an object in a caption, or ``None`` when it can.

    A thing is one or more lower-case words (letters, inner ``'`` or ``-``) separated by
    single spaces, none of them in :data:`GRAMMAR_WORDS` except a last word of
    :data:`NOUN_COLOURS`.
    """
    words = thing.split(" ")
    if not thing or any(_WORD.fullmatch(word) is None for word in words):
        return f"a thing is lower-case words separated by single spaces, got {thing!r}"
    reserved = [word for word in words if word in GRAMMAR_WORDS]
    if reserved and reserved[-1] == words[-1] in NOUN_COLOURS:
        reserved.pop()
    if reserved:
        return f"the thing {thing!r} holds words of the caption grammar: {reserved}"
    return None


@dataclass(frozen=True)
class ObjectSpec:
    """What a caption says about one kind of object.

    Args:
        colour: one of :data:`~models.shapes.vocab.COLOURS`, or ``None`` when unstated.
        thing: what the object is, in words (:func:`thing_problem`): a shape of
            :data:`~models.shapes.vocab.SHAPES` or any noun with its modifiers, in the
            singular ("cat", "grinning cat", "pair of shoes").
        count: 1 for "a"/"an" (at least one), 2 or 3 for a stated number (exactly that many).
        size: ``"small"``, ``"large"`` or ``None`` when unstated.
        position: a grid position name or ``None`` when unstated (only with ``count == 1``).
    """

    colour: str | None
    thing: str
    count: int = 1
    size: str | None = None
    position: str | None = None

    def __post_init__(self) -> None:
        if self.colour is not None and self.colour not in COLOURS:
            raise ValueError(f"unknown colour {self.colour!r}; expected one of {COLOURS}")
        problem = thing_problem(self.thing)
        if problem is not None:
            raise ValueError(problem)
        check_phrase(self.count, self.size, self.position)
        if self.count == 1 and not _single_form(self.thing):
            raise ValueError(f"a single object's thing is singular, got {self.thing!r}")
        if self.count > 1 and not countable(self.thing):
            raise ValueError(f"the plural of {self.thing!r} does not read back as it")

    @property
    def pair(self) -> tuple[str | None, str]:
        """The ``(colour, thing)`` combination this phrase names."""
        return (self.colour, self.thing)

    @property
    def counted(self) -> bool:
        """Whether the phrase states an exact number ("two", "three")."""
        return self.count > 1


def check_phrase(count: int, size: str | None, position: str | None) -> None:
    """Raise ``ValueError`` unless an object phrase's ``count`` is 1, 2 or 3, its ``size``
    one of :data:`SIZES` (or unstated) and its ``position`` a grid position stated for a
    single object only (or unstated)."""
    if count not in (1, 2, 3):
        raise ValueError(f"count must be 1, 2 or 3, got {count}")
    if size is not None and size not in SIZES:
        raise ValueError(f"unknown size {size!r}; expected one of {SIZES} or None")
    if position is not None:
        if position not in POSITIONS:
            raise ValueError(f"unknown position {position!r}; expected {POSITIONS}")
        if count != 1:
            raise ValueError("a position can only be stated for a single object")


def check_objects(kinds: list[Any], kind: str, named: str, relation: str | None) -> None:
    """Raise ``ValueError`` unless a caption names 1 to 3 distinct ``kinds`` of ``kind``
    (``named`` says what makes them distinct) and its ``relation`` is one of
    :data:`RELATIONS` or ``None``."""
    if not 1 <= len(kinds) <= 3:
        raise ValueError(f"a caption names 1 to 3 kinds of {kind}, got {len(kinds)}")
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"object phrases must name distinct {named}: {kinds}")
    if relation is not None and relation not in RELATIONS:
        raise ValueError(f"unknown relation {relation!r}; expected {RELATIONS}")


def _single_form(written: str) -> bool:
    """Whether ``written`` is a thing as a single object writes it: its head is not a
    plural ("a red circles") and it is not a bare plurale tantum ("a glasses")."""
    return not is_plural(head_word(written)) and as_counted(written) == written


def _counted_form(written: str) -> str:
    """The stored thing of a counted phrase that writes it as ``written`` ("mice" ->
    "mouse", "glasses" -> "pair of glasses")."""
    return as_counted(singular(written))


@dataclass(frozen=True)
class ParsedCaption:
    """The constraints a caption states.

    ``objects`` name distinct ``(colour, thing)`` pairs; ``relation`` (one of
    :data:`RELATIONS` or ``None``) relates ``objects[0]`` to ``objects[1]``: with counts,
    every copy of the first to every copy of the second ("two blue squares above a
    green triangle").
    """

    objects: tuple[ObjectSpec, ...]
    relation: str | None = None

    def __post_init__(self) -> None:
        pairs = [spec.pair for spec in self.objects]
        check_objects(pairs, "object", "colour-thing pairs", self.relation)
        if self.relation is not None and len(self.objects) != 2:
            raise ValueError("a relation relates exactly two object phrases")
        if self.relation is not None and any(spec.position for spec in self.objects):
            raise ValueError("a relation caption cannot also fix grid positions")
        total = sum(spec.count for spec in self.objects)
        if total > 3:
            raise ValueError(f"a caption describes at most 3 objects, got {total}")


def object_phrase(spec: ObjectSpec) -> str:
    """``ObjectSpec("orange", "triangle", size="small")`` -> ``"a small orange triangle"``;
    ``ObjectSpec(None, "mouse", count=2)`` -> ``"two mice"``."""
    return written_phrase(spec.thing, spec.count, spec.size, spec.colour, spec.position)


def written_phrase(
    noun: str, count: int, size: str | None, colour: str | None, position: str | None
) -> str:
    """One object phrase: its determiner ("a"/"an" by sound, "two", "three"), size,
    colour, ``noun`` (plural for a count above one) and place."""
    words = [w for w in (size, colour) if w is not None]
    noun = plural(noun) if count > 1 else noun
    determiner = _NUMBER_TEXT[count] if count > 1 else article([*words, noun][0])
    phrase = " ".join([determiner, *words, noun])
    return phrase if position is None else f"{phrase} {_PLACE_TEXT[position]}"


def compose_caption(parsed: ParsedCaption) -> str:
    """Write the caption of ``parsed`` with the templates above."""
    return joined_phrases([object_phrase(spec) for spec in parsed.objects], parsed.relation)


def joined_phrases(phrases: list[str], relation: str | None) -> str:
    """Object phrases as one caption: the first related to the second, or listed."""
    if relation is not None:
        return f"{phrases[0]} {_RELATION_TEXT[relation]} {phrases[1]}"
    if len(phrases) == 1:
        return phrases[0]
    return ", ".join(phrases[:-1]) + " and " + phrases[-1]


_PHRASE = re.compile(
    r"^(?P<det>a|an|two|three) "
    rf"(?:(?P<size>{'|'.join(SIZES)}) )?"
    rf"(?:(?P<colour>{'|'.join(COLOURS)}) )?"
    r"(?P<thing>[a-z'-]+(?: [a-z'-]+)*?)"
    rf"(?: (?P<place>{'|'.join(map(re.escape, _PLACE_TEXT.values()))}))?$"
)
_PLACE_NAME = {text: name for name, text in _PLACE_TEXT.items()}
_RELATION_SPLIT = re.compile(
    r" (" + "|".join(re.escape(text) for text in _RELATION_TEXT.values()) + r") "
)
_RELATION_NAME = {text: name for name, text in _RELATION_TEXT.items()}


def _parse_phrase(phrase: str, caption: str) -> ObjectSpec:
    match = _PHRASE.match(phrase)
    if match is None or thing_problem(match["thing"]) is not None:
        raise ValueError(f"cannot parse object phrase {phrase!r} in caption {caption!r}")
    count = _NUMBER_VALUE[match["det"]]
    written = match["thing"]
    thing = _counted_form(written) if count > 1 else written
    agrees = plural(thing) == written if count > 1 else _single_form(written)
    if not agrees:
        raise ValueError(f"number and noun disagree in {phrase!r}")
    place = match["place"]
    return ObjectSpec(
        colour=match["colour"],
        thing=thing,
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

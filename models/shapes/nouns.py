"""Singular and plural forms of the things a caption names ("two cats" <-> "cat").

A thing is a few words, e.g. ``"grinning cat"``, ``"pair of shoes"``, ``"man in tuxedo"``.
Its **head** is the word that takes the number: a first word that names a person (or a
leaf) heads what follows it (:data:`_LEADING_HEADS`: "*person* running", "*man* in
tuxedo", "*leaf* fluttering in wind"); otherwise the last word before the first link word
(:data:`_LINKS`: "*pair* of shoes", "*cat* with wry smile", "*sun* behind cloud"), else
the last word ("grinning *cat*"). Word forms come from ``inflect`` (irregulars:
mouse/mice, person/people, knife/knives, fish/fish), with guards of our own:

- **Only a stated number singularises without question.** ``inflect`` strips a final
  "s" from singular words too (bus -> "bu", cactus -> "cactu"), so a head read without a
  number is taken as plural (:func:`is_plural`) only when it does not end in "us", "ss" or
  "is" and is not one of :data:`_SINGULAR_S`.
- **A plural stays plural.** :func:`plural` leaves a thing whose head is plural already
  ("people holding hands", "dice") as it is.
- **Where inflect errs.** An "-o" noun takes "-s" unless it is one of :data:`_OES`
  (potatoes); an "-s" noun takes "-es" (tennises, not "tenniss"); :data:`_PLURALS` holds
  the few others (sushi, bison).
- **Pluralia tantum** (:data:`PAIRED`: glasses, scissors, jeans, ...) have no singular:
  one of them is written as a "pair of" it (:func:`as_counted`), so "glasses" reads as
  "a pair of glasses" and never as a drinking glass.
"""

from __future__ import annotations

from functools import cache, lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import inflect


@cache
def _engine() -> inflect.engine:
    """inflect's engine, made on the first word form asked for. Importing ``inflect``
    takes seconds (typeguard instruments its functions as they are defined:
    ``benchmarks/import_time.py``), and every command and server imports this module
    while only reading a prompt needs it."""
    import inflect

    return inflect.engine()


#: Nouns with no singular form; one of them is "a pair of" it.
PAIRED: frozenset[str] = frozenset(
    [
        "glasses",
        "sunglasses",
        "goggles",
        "scissors",
        "pliers",
        "tongs",
        "tweezers",
        "binoculars",
        "trousers",
        "pants",
        "jeans",
        "shorts",
        "leggings",
        "pyjamas",
        "pajamas",
        "headphones",
        "earphones",
    ]
)
#: Singular nouns ending in "s" that the suffix guard of :func:`is_plural` does not catch.
_SINGULAR_S: frozenset[str] = frozenset(
    [
        "gas",
        "atlas",
        "canvas",
        "christmas",
        "lens",
        "news",
        "series",
        "species",
        "chess",
        "bias",
        "lotus",
    ]
)
#: Plurals ``inflect`` gets wrong or odd: unchanged plurals it does not know, the game
#: golf as a half ("golves"), "monies".
_PLURALS: dict[str, str] = {
    "sushi": "sushi",
    "shrimp": "shrimp",
    "bison": "bison",
    "golf": "golfs",
    "money": "moneys",
}
#: Nouns in "-o" that take "-oes"; ``inflect`` gives "-oes" to any "-o" noun it does not
#: know ("burritoes", "gelatoes"), where most take a plain "-s".
_OES: frozenset[str] = frozenset(
    ["potato", "tomato", "hero", "echo", "veto", "torpedo", "mosquito", "volcano", "tornado"]
    + ["buffalo", "domino", "embargo", "superhero"]
)
#: Words after which the head's phrase ends ("face *with* tears of joy").
_LINKS: frozenset[str] = frozenset(
    ["of", "in", "with", "on", "at", "for", "without", "behind", "over"]
)
#: First words that head the words after them ("person running", "men dancing").
_LEADING_HEADS: frozenset[str] = frozenset(
    ["person", "man", "woman", "child", "boy", "girl", "leaf"]
    + ["people", "men", "women", "children", "boys", "girls", "leaves"]
)


def _split_head(thing: str) -> tuple[str, str, str]:
    """``thing`` as ``(before, head, after)`` around its head word."""
    words = thing.split(" ")
    end = next((i for i, word in enumerate(words) if i > 0 and word in _LINKS), len(words))
    head = 0 if words[0] in _LEADING_HEADS else end - 1
    before, after = " ".join(words[:head]), " ".join(words[head + 1 :])
    return (before + " " if before else ""), words[head], (" " + after if after else "")


def head_word(thing: str) -> str:
    """The word of ``thing`` that takes the number (see the module docstring)."""
    return _split_head(thing)[1]


@lru_cache(maxsize=4096)
def _singular_word(word: str) -> str:
    found = _engine().singular_noun(word)
    return found if isinstance(found, str) and found else word


@lru_cache(maxsize=4096)
def _plural_word(word: str) -> str:
    if word in _PLURALS:
        return _PLURALS[word]
    if is_plural(word):
        return word
    found = str(_engine().plural_noun(word))
    if word.endswith("o") and found == word + "es" and word not in _OES:
        return word + "s"
    if word.endswith("s") and found == word + "s":  # inflect: "tennis" -> "tenniss"
        return word + "es"
    return found


def countable(thing: str) -> bool:
    """Whether the plural of ``thing`` reads back as it (true of English nouns; not of
    every string: "u" -> "us" -> "u" holds, but "hy" -> "hies" -> "hy" does not)."""
    return as_counted(singular(plural(thing))) == thing


def is_plural(word: str) -> bool:
    """Whether ``word``, read with no number, is a plural ("cats", "mice", "glasses"; not
    "bus", "cactus", "glass", "fish")."""
    if word in PAIRED:
        return True
    if word.endswith(("us", "ss", "is")) or word in _SINGULAR_S:
        return False
    return _singular_word(word) != word


def singular(thing: str) -> str:
    """The singular of a plural ``thing``: its head singularised ("grinning cats" ->
    "grinning cat", "pairs of shoes" -> "pair of shoes"); a plurale tantum stays as it is.
    Only call it on a thing known to be plural (after a number > 1, or :func:`is_plural`)."""
    before, head, after = _split_head(thing)
    if head in PAIRED:
        return thing
    return before + _singular_word(head) + after


def plural(thing: str) -> str:
    """The plural of a singular ``thing``: its head pluralised ("cat" -> "cats", "man in
    tuxedo" -> "men in tuxedo", "person running" -> "people running"); a head that is
    plural already stays ("scissors", "people hugging")."""
    before, head, after = _split_head(thing)
    return before + _plural_word(head) + after


def as_counted(thing: str) -> str:
    """``thing`` in a countable singular form: one headed by a plurale tantum becomes
    "pair of" it ("reading glasses" -> "pair of reading glasses"); anything else is
    returned unchanged."""
    return f"pair of {thing}" if head_word(thing) in PAIRED else thing


def article(word: str) -> str:
    """The indefinite article before ``word``: "an apple", "a unicorn", "an hour"."""
    return str(_engine().a(word)).partition(" ")[0]

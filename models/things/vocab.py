"""The vocabulary of everyday things: curated emoji, with names and aliases, plus the shapes.

Source: the ``EMOJI_DATA`` table of the PyPI package ``emoji`` (CLDR short names and
GitHub/Slack-style aliases). The curation is a pure function of that table, applied in
this order (each rule is a named predicate below, so a count can be traced to it):

1. **Fully qualified, drawable.** Status ``fully_qualified``; emoji version at most
   :data:`MAX_EMOJI_VERSION` (15.1, what Debian bookworm's ``fonts-noto-color-emoji``
   2.042 draws; later emoji render as nothing).
2. **No variants of a person.** No skin-tone modifiers (U+1F3FB-1F3FF), no hair
   components (U+1F9B0-1F9B3: "man: red hair"), no "facing right" direction variants.
3. **No keycaps** (sequences with U+20E3: "keycap 1", and "keycap 10").
4. **One clock.** The 24 clock faces ("three o'clock", "ten-thirty") merge into one
   thing, ``clock`` (drawn as three o'clock); "alarm clock" and "mantelpiece clock"
   stay, they are other objects.
5. **A handful of flags.** Country and region flags (regional-indicator pairs, tag
   sequences) are dropped except :data:`KEPT_FLAGS`, named "flag of <country>"; the
   other flags (chequered, pirate, rainbow, white, triangular, ...) stay.
6. **One family, one kiss, one couple.** "family: man, woman, boy" and the like, and
   the gendered "kiss"/"couple with heart" combinations, drop; the plain "family",
   "kiss" and "couple with heart" stay.
7. **Gender variants merge.** A gendered name ("man X", "woman X", "men X", "women X",
   "X man", "X woman", "woman and man X") drops when its neutral form ("person X",
   "people X", "X", "X person") is also in the table ("woman running" -> "person
   running", "man health worker" -> "health worker"). The bare "man" and "woman" stay.
8. **Colour series merge.** Names "<colour> <noun>" where at least three colours share
   the noun ("red heart", "blue heart", ... ; "green book", "blue book", "orange book")
   become one thing named by the noun ("heart", "book"), drawn as the red member if
   there is one, else the first; colour then comes from colour variants.
9. **The shapes keep their words.** Emoji whose names hold "circle", "circled",
   "square", "squared" or "triangle", or "<colour or size> diamond", are geometric marks
   that would blur with the shapes world's circle, square and triangle: dropped.
10. **Pictures, not text.** Symbols that are letters in a box do not read at 64 px and
    have no meaning beyond their text: names whose first word is an upper-case code
    ("OK button", "SOS button", "ATM sign", "UP! button", "ON! arrow"), start with
    "Japanese" or "input", are dropped.

Names are cleaned to plain lower-case words: accents stripped, "&" -> "and", curly
quotes -> "'", other punctuation but "'" and "-" removed ("T-Rex" -> "t-rex",
"Mrs. Claus" -> "mrs claus"). Aliases are the package's, cleaned the same way, keeping
only plain words (letters, spaces, "'" and "-", at least 3 characters) that no other
thing uses as a name or alias.

The three shapes of :mod:`models.shapes` ("circle", "square", "triangle") are things too,
with no emoji: they are drawn procedurally.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import emoji

from models.shapes.vocab import SHAPES

MAX_EMOJI_VERSION = 15.1
#: Country flags kept (CLDR names as the ``emoji`` package spells them).
KEPT_FLAGS: tuple[str, ...] = (
    "United States",
    "United Kingdom",
    "Japan",
    "France",
    "Brazil",
    "Canada",
)
#: The categories a thing can fall in (coarse, by rule: see :func:`_category`).
CATEGORIES: tuple[str, ...] = ("shape", "flag", "person", "face", "object")

_SKIN_TONES = range(0x1F3FB, 0x1F400)
_HAIR = range(0x1F9B0, 0x1F9B4)
_KEYCAP = 0x20E3
_REGIONAL = range(0x1F1E6, 0x1F200)
_TAGS = range(0xE0020, 0xE0080)
_ZWJ = "\u200d"
#: Colour words of the colour series (rule 8) and of geometric marks (rule 9).
_SERIES_COLOURS = (
    "red",
    "orange",
    "yellow",
    "green",
    "blue",
    "light blue",
    "purple",
    "brown",
    "black",
    "white",
    "grey",
    "pink",
)
_SHAPE_WORDS = frozenset({"circle", "circled", "square", "squared", "triangle"})
_DIAMOND = re.compile(r"^(?:(?:small|large|" + "|".join(_SERIES_COLOURS) + r") )+diamond$")
_CLOCK_FACE = re.compile(r"^\w+(?: o'clock|-thirty)$")
_PERSON_WORDS = ("person", "people", "man", "woman", "men", "women", "boy", "girl", "child")


@dataclass(frozen=True)
class Thing:
    """One drawable thing.

    Args:
        key: unique identifier, the name with spaces as underscores ("red_apple").
        name: CLDR name in plain lower-case words ("red apple").
        emoji: the emoji string drawn for it, or ``None`` for a procedural shape.
        aliases: other plain-word names from the ``emoji`` package ("ramen").
        category: one of :data:`CATEGORIES`.
    """

    key: str
    name: str
    emoji: str | None
    aliases: tuple[str, ...] = ()
    category: str = "object"

    @property
    def is_shape(self) -> bool:
        return self.emoji is None


def clean_words(text: str) -> str:
    """Plain lower-case words: ``"Côte d’Ivoire"`` -> ``"cote d'ivoire"``."""
    text = text.strip(":").replace("_", " ").replace("’", "'").replace("&", "and")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^A-Za-z0-9' -]", " ", text)
    return " ".join(text.lower().split())


def _raw_name(emoji_data: dict[str, object]) -> str:
    name = emoji_data["en"]
    assert isinstance(name, str)
    return name.strip(":").replace("_", " ").replace("’", "'")


def _codepoints(text: str) -> list[int]:
    return [ord(c) for c in text]


def _drawable(text: str, data: dict[str, object]) -> bool:
    """Rule 1."""
    version = data["E"]
    assert isinstance(version, int | float)
    return data["status"] == emoji.STATUS["fully_qualified"] and version <= MAX_EMOJI_VERSION


def _person_variant(text: str, name: str) -> bool:
    """Rule 2."""
    points = _codepoints(text)
    return any(p in _SKIN_TONES or p in _HAIR for p in points) or name.endswith(" facing right")


def _keycap(text: str) -> bool:
    """Rule 3."""
    return _KEYCAP in _codepoints(text)


def _flag(text: str) -> bool:
    """Rule 5: a country or region flag."""
    points = _codepoints(text)
    return any(p in _REGIONAL or p in _TAGS for p in points)


def _family_combination(name: str) -> bool:
    """Rule 6."""
    return any(name.startswith(head + " ") for head in ("family", "kiss", "couple with heart"))


def _neutral_forms(name: str) -> list[str]:
    """Rule 7: the neutral names a gendered ``name`` would merge into."""
    forms = []
    for gendered, neutral in (
        ("woman and man ", "people "),
        ("man ", "person "),
        ("woman ", "person "),
        ("men ", "people "),
        ("women ", "people "),
    ):
        if name.startswith(gendered):
            rest = name[len(gendered) :]
            forms += [neutral + rest, rest]
    for gendered in (" man", " woman"):
        if name.endswith(gendered):
            stem = name[: -len(gendered)]
            forms += [stem + " person", stem]
    return forms


def _geometric(name: str) -> bool:
    """Rule 9."""
    words = set(name.lower().split())
    return bool(words & _SHAPE_WORDS) or bool(_DIAMOND.match(name.lower()))


def _text_symbol(name: str) -> bool:
    """Rule 10."""
    first = re.sub(r"[^A-Za-z]", "", name.split()[0])
    return (
        (first.isupper() and len(name.split()) > 1)
        or name.startswith("Japanese")
        or name.startswith("input ")
        or name.startswith("keycap")
    )


def _series_noun(name: str) -> str | None:
    """The noun of a "<colour> <noun>" name, else ``None``."""
    for colour in sorted(_SERIES_COLOURS, key=len, reverse=True):
        if name.startswith(colour + " "):
            return name[len(colour) + 1 :]
    return None


def _category(name: str, text: str | None) -> str:
    if text is None:
        return "shape"
    if name.startswith("flag of ") or "flag" in name.split():
        return "flag"
    if "face" in name.split():
        return "face"
    if any(word in _PERSON_WORDS for word in name.split()):
        return "person"
    return "object"


def _clean_aliases(aliases: Iterable[str]) -> list[str]:
    out = []
    for alias in aliases:
        cleaned = clean_words(alias)
        if len(cleaned) >= 3 and re.fullmatch(r"[a-z' -]+", cleaned):
            out.append(cleaned)
    return out


def _candidates() -> dict[str, tuple[str, list[str]]]:
    """Rules 1-7, 9 and 10: raw CLDR name -> (emoji, raw aliases), in table order."""
    table = emoji.EMOJI_DATA
    kept: dict[str, tuple[str, list[str]]] = {}
    for text, data in table.items():
        name = _raw_name(data)
        aliases = list(data.get("alias", []) or [])
        if not _drawable(text, data) or _person_variant(text, name) or _keycap(text):
            continue
        if _CLOCK_FACE.match(name):
            if name == "three o'clock":
                kept["clock"] = (text, [])
            continue
        if _flag(text):
            if name in KEPT_FLAGS:
                kept[f"flag of {name}"] = (text, [])
            continue
        if _family_combination(name) or _geometric(name) or _text_symbol(name):
            continue
        kept[name] = (text, aliases)
    for name in list(kept):
        if name not in ("man", "woman") and any(f in kept for f in _neutral_forms(name)):
            del kept[name]
    return kept


def _merge_series(kept: dict[str, tuple[str, list[str]]]) -> dict[str, tuple[str, list[str]]]:
    """Rule 8."""
    series: dict[str, list[str]] = defaultdict(list)
    for name in kept:
        noun = _series_noun(name)
        if noun is not None:
            series[noun].append(name)
    merged = dict(kept)
    for noun, members in series.items():
        if len(members) < 3:
            continue
        head = f"red {noun}" if f"red {noun}" in members else members[0]
        text, aliases = kept[head]
        for member in members:
            del merged[member]
        merged[noun] = (text, aliases)
    return merged


@lru_cache(maxsize=1)
def things() -> tuple[Thing, ...]:
    """The whole vocabulary: the three shapes first, then the curated emoji in table order."""
    curated = _merge_series(_candidates())
    cleaned = {clean_words(name): value for name, value in curated.items()}
    claims: dict[str, int] = defaultdict(int)
    for name, (_, aliases) in cleaned.items():
        for alias in {*_clean_aliases(aliases), name}:
            claims[alias] += 1
    for shape in SHAPES:
        claims[shape] += 1
    out = [Thing(key=shape, name=shape, emoji=None, category="shape") for shape in SHAPES]
    for name, (text, aliases) in cleaned.items():
        own = dict.fromkeys(
            a for a in _clean_aliases(aliases) if a != name and claims[a] == 1 and a not in cleaned
        )
        key = name.replace(" ", "_").replace("'", "").replace("-", "_")
        out.append(Thing(key, name, text, tuple(own), _category(name, text)))
    return tuple(out)


@lru_cache(maxsize=1)
def things_by_key() -> dict[str, Thing]:
    """``key -> Thing``."""
    return {thing.key: thing for thing in things()}


def thing(key: str) -> Thing:
    """The thing called ``key``; a miss raises ``KeyError`` naming a few close keys."""
    table = things_by_key()
    if key not in table:
        close = [k for k in table if key in k][:5]
        raise KeyError(f"unknown thing {key!r}; close keys: {close}")
    return table[key]


def thing_keys() -> tuple[str, ...]:
    """Every key, in vocabulary order (the judge's class order)."""
    return tuple(thing.key for thing in things())

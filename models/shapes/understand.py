"""Prompt understanding: free phrasing -> the caption grammar's :class:`ParsedCaption`.

Users type "a big yellow triangle above a small green circle", "a cat on a sofa", "two
mice under a wooden table" or "no circles, just a square". The planner and the model
know only the caption grammar (:mod:`models.shapes.captions`), whose objects are
``(colour, thing, count, size, position)`` with an open ``thing``. :func:`understand`
reads a prompt in three passes:

1. **Words.** Lower-case, split hyphens, cut into words, numerals and punctuation.
2. **Lexicon** (longest match first). Layout words fold onto the grammar's: big, huge,
   large -> large; tiny, little, small -> small; beneath, under, below -> below; on top
   of, over, above -> above; left of, to the left of -> left of; next to, beside, near ->
   "beside" (the side comes from another clause); top, upper / bottom, lower / left /
   right / centre, center, middle make grid places; a, an, one, single / two, 2, a pair
   of / three, 3 make counts; four and more are numbers it cannot draw; no, not, without
   negate; "it", "its" and "the X" refer back; in front of, behind, between are
   relations the grid cannot show; picture, image, background are the canvas. Function
   words ("there is", "draw", "the", "very") carry nothing. Three words depend on what
   follows: "on" before an object is "above" ("a cat on a sofa"; "on the left" is a
   place), "in" before an object is a relation the grid cannot show ("a cat in a box"),
   and an "-ing" word between a noun and a determiner is a verb ("a dog chasing a
   ball"). **Every other word is content**: part of a thing.
3. **Reading.** ``[no] [count] (size | colour | content word)+`` make a noun phrase: the
   first palette colour and size are its colour and size, the content words (joined
   through "of" or "with" and no determiner: "a cup of coffee", "a cat with wry smile";
   "a cat with a hat" is two objects) its thing, singular (:mod:`models.shapes.nouns`:
   "two mice" -> mouse; a bare plural is one). A negated phrase is a thing not to draw
   (:attr:`Understanding.negative`). An indefinite phrase names a new object (or the one
   of the same colour and thing named before; "another" adds one), a definite one ("the
   cat", "the red one", "it") refers back, or names a new object when nothing matches.
   Per sentence: a relation relates the phrase before it to the one after it; fronted
   ("to the left of B, A") it relates the next two; with no object after it ("B with A
   to its left") it relates the phrase before it to the object mentioned before that. A
   place goes to the phrase it touches, else the next phrase, else the last one. A
   referring phrase given one side ("with the circle on the left", "the square is on
   top") while exactly two single objects are named sets their relation instead of a
   grid cell.

Nothing is dropped for being unknown: a word no list knows is a thing (a prompt of one
such word, "hello", is the thing "hello"). What cannot be read (a colour or size with no
thing, a relation the grid cannot show, a second relation, "beside" without a side, a
number above three, a fourth object, a place of a counted object) is dropped and reported
in :attr:`Understanding.ignored`, in the prompt's words. A prompt with no thing at all
("red") is understood as nothing (``parsed`` is ``None``), and the pipeline draws it as
typed. The result satisfies :class:`ParsedCaption`'s rules, so
:func:`~models.shapes.captions.compose_caption` writes it back in the grammar: the plan
in words.

Why hand-written rules: the layout vocabulary is closed (8 colours, 2 sizes, 9 places,
4 relations, counts to three) and so are English function words; a rule reads them
exactly and names each word it did not use, in microseconds and with no weights, and
everything else is the thing, which needs no reading: it goes to the text encoder as
typed. A mapping learned from MiniLM states would have to recover which object each
word binds to, which those states hold only non-linearly (a linear probe of them reads
the word order at 0.79: ``benchmarks/text_order_probe.py`` as of commit dd75519), and
could not say which words it ignored. No parser library is needed for a grammar of this
size; ``inflect`` gives the singular and plural forms of open nouns.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from models.shapes.captions import NOUN_COLOURS, ObjectSpec, ParsedCaption, compose_caption
from models.shapes.nouns import PAIRED, as_counted, countable, head_word, is_plural, singular
from models.shapes.vocab import COLOURS, GRID, POSITIONS

_INVERSE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}

#: A lexicon entry's value, by kind: a count, row or column (int; "another" for that
#: determiner), a size or colour (str), a relation with its flag ("its"), or nothing.
_Value: TypeAlias = int | str | tuple[str, bool] | None


def _entries() -> dict[tuple[str, ...], tuple[str, _Value]]:
    """The lexicon: word sequence -> (kind, value)."""
    lexicon: dict[tuple[str, ...], tuple[str, _Value]] = {}

    def add(kind: str, value: _Value, *phrases: str) -> None:
        for phrase in phrases:
            lexicon[tuple(phrase.split())] = (kind, value)

    add("det", 1, "a", "an", "one", "single", "a single", "one single")
    add("det", "another", "another")
    add("num", 2, "two", "2", "a pair of", "pair of", "a couple of", "couple of")
    add("num", 3, "three", "3", "a trio of", "trio of")
    add(
        "bignum",
        None,
        *["four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "dozen"],
    )
    add("bignum", None, "many", "several", "lots of", "a lot of", "a few", "few", "a dozen")
    add("neg", None, "no", "not", "without", "never", "nor", "except", "but no", "and no")
    add("the", None, "the", "this", "that")
    add("size", "small", "small", "tiny", "little", "mini", "smaller", "smallish", "wee")
    add("size", "large", "large", "big", "huge", "giant", "bigger", "larger", "enormous")
    for colour in COLOURS:
        add("colour", colour, colour)
    add("it", None, "it", "its", "itself")
    for side, rel in (("left", "left of"), ("right", "right of")):
        add(
            "rel",
            (rel, False),
            f"to the {side} of",
            f"{side} of",
            f"on the {side} of",
            f"at the {side} of",
            f"on the {side} side of",
            f"to the {side} side of",
            f"{side} side of",
        )
        add("rel", (rel, True), f"to its {side}", f"on its {side}", f"at its {side}")
    add("rel", ("above", False), "above", "over", "on top of", "atop", "higher than")
    add("rel", ("below", False), "below", "under", "beneath", "underneath", "lower than")
    add("rel", ("beside", False), "next to", "beside", "alongside", "by the side of", "near")
    add("norel", None, "in front of", "behind", "between", "inside", "around", "inside of")
    add("norel", None, "in the front of", "in back of", "at the back of", "within", "among")
    add("canvas", None, "picture", "image", "scene", "canvas", "background", "backdrop")
    add("canvas", None, "photo", "photograph", "drawing of", "illustration", "frame")
    add("row", 0, "top", "upper", "on top")
    add("row", 2, "bottom", "lower")
    add("col", 0, "left", "lefthand", "left hand")
    add("col", 2, "right", "righthand", "right hand")
    add("mid", None, "center", "centre", "middle", "central", "centred", "centered")
    add("conn", None, "and", "plus", "&", "with", "as well as", "also", "along with")
    add("conn", None, "together with", "while", "has", "have", "then", "next")
    add("break", None, ".", ";", "!", "?")
    add("comma", None, ",", ":")
    fillers = (
        "there is are s be being sits sitting sit lies lying placed located positioned "
        "stands standing draw paint show render make create generate give me i want would "
        "like please just in at on to of corner side edge part area half which that who "
        "exactly only some any very really quite so too is are was were been am do does "
        "did can could will should may might must shall you your my our their his her "
        "them they we he she for from as here what how both each every all up own simply "
        "kind sort type made style"
    )
    add("filler", None, *fillers.split())
    return lexicon


_LEXICON = _entries()
_LONGEST = max(len(phrase) for phrase in _LEXICON)
_TOKEN = re.compile(r"[a-z]+|\d+|[.,;:!?&]")
#: Token kinds that are never reported as ignored (function words, punctuation, words
#: about the canvas, and "on", which is a relation only before an object).
_NEUTRAL = {"det", "the", "it", "conn", "break", "comma", "filler", "canvas", "onrel"}
#: Token kinds that can be part of a thing's words.
_THING = {"unknown"}
#: Words of a phrase about the canvas that ask for what it already is.
_DEFAULT_CANVAS = {"a", "an", "the", "black", "plain", "dark", "empty", "blank"}
#: Token kinds that open a noun phrase.
_OPENS = {"det", "num", "bignum", "the", "size", "colour", *_THING}


@dataclass
class _Item:
    """A lexicon match over tokens ``start:end``."""

    kind: str
    value: _Value
    start: int
    end: int
    text: str

    def number(self) -> int:
        """The value of a count, row or column."""
        assert isinstance(self.value, int)
        return self.value

    def word(self) -> str:
        """The value of a size or colour."""
        assert isinstance(self.value, str)
        return self.value

    def flagged(self) -> tuple[str, bool]:
        """The value of a relation: (name, "its")."""
        assert isinstance(self.value, tuple)
        return self.value


def _tokens(items: list[_Item]) -> set[int]:
    """The token indices the items cover."""
    return {t for item in items for t in range(item.start, item.end)}


@dataclass
class _Phrase:
    """A noun phrase (:func:`_read_phrase`), or "it".

    ``words`` are the thing as written; :meth:`finish` sets ``thing``, its stored form
    (singular, and "pair of" a plurale tantum), and the count a plural implies.
    """

    items: list[_Item]
    count: int | None = None
    definite: bool = False
    size: str | None = None
    colour: str | None = None
    words: list[str] = field(default_factory=list)
    thing: str | None = None
    pronoun: bool = False
    another: bool = False
    negated: bool = False
    paired: bool = False

    @property
    def tokens(self) -> set[int]:
        return _tokens(self.items)

    def finish(self) -> None:
        """Set ``thing`` from ``words``: "two mice" -> "mouse", "glasses" -> "pair of
        glasses"; "a pair of glasses" is one pair, "a pair of shoes" two shoes."""
        if not self.words:
            return
        written = " ".join(self.words)
        head = head_word(written)
        counted = self.count is not None and self.count > 1
        self.thing = as_counted(singular(written) if counted or is_plural(head) else written)
        if self.paired and head in PAIRED:
            self.count = 1  # "a pair of glasses" is one pair
        elif counted and not countable(self.thing):
            self.count = 1  # a plural that cannot be written back: its number is reported
            self.items = [it for it in self.items if it.kind != "num"]


@dataclass
class _Place:
    items: list[_Item]
    rows: set[int] = field(default_factory=set)
    cols: set[int] = field(default_factory=set)
    mid: bool = False

    @property
    def tokens(self) -> set[int]:
        return _tokens(self.items)

    def cell(self) -> int | None:
        """The grid cell it names (an unstated axis is the middle), ``None`` if contradictory."""
        if len(self.rows) > 1 or len(self.cols) > 1:
            return None
        row = next(iter(self.rows), GRID // 2)
        col = next(iter(self.cols), GRID // 2)
        return row * GRID + col

    def side(self) -> str | None:
        """The relation a single direction word gives ("left" -> "left of"), else ``None``."""
        if self.mid or len(self.rows) + len(self.cols) != 1:
            return None
        if self.rows:
            return "above" if 0 in self.rows else "below"
        return "left of" if 0 in self.cols else "right of"


@dataclass
class _Object:
    colour: str | None
    thing: str
    count: int = 1
    size: str | None = None
    position: str | None = None
    tokens: set[int] = field(default_factory=set)
    place_tokens: set[int] = field(default_factory=set)


#: What :func:`_group` makes of the items: noun phrases, places and the loose items.
_Element: TypeAlias = _Phrase | _Place | _Item


def _phrase_at(elements: Sequence[_Element], index: int) -> _Phrase:
    """``elements[index]``, known to be a noun phrase."""
    phrase = elements[index]
    assert isinstance(phrase, _Phrase)
    return phrase


@dataclass(frozen=True)
class Understanding:
    """What a prompt was read as.

    Args:
        prompt: the prompt as given.
        parsed: the scene specification read from it, ``None`` when nothing was understood.
        ignored: the prompt's words that were not used, as phrases in prompt order.
        negative: what the prompt asks not to draw ("no circles, just a square" ->
            ``"circle"``; several joined by ``", "``), ``None`` when nothing is negated:
            a negative prompt for the sampler, never part of ``parsed``.
        not_learned: the things of ``parsed`` that the model reading the prompt never
            learned to draw (a closed world's: the shapes model knows three shapes), in
            prompt order; they are drawn as typed, and the picture will not show them.
    """

    prompt: str
    parsed: ParsedCaption | None
    ignored: tuple[str, ...]
    negative: str | None = None
    not_learned: tuple[str, ...] = ()

    @property
    def caption(self) -> str | None:
        """The understood prompt in the caption grammar (what is planned and drawn)."""
        return None if self.parsed is None else compose_caption(self.parsed)

    @property
    def complete(self) -> bool:
        """Whether every content word of the prompt was used."""
        return self.parsed is not None and not self.ignored


def _lex(tokens: list[str]) -> list[_Item]:
    items, i = [], 0
    while i < len(tokens):
        for length in range(min(_LONGEST, len(tokens) - i), 0, -1):
            entry = _LEXICON.get(tuple(tokens[i : i + length]))
            if entry is not None:
                items.append(_Item(*entry, i, i + length, " ".join(tokens[i : i + length])))
                i += length
                break
        else:
            kind = "bignum" if tokens[i].isdigit() else "unknown"
            items.append(_Item(kind, None, i, i + 1, tokens[i]))
            i += 1
    for index, item in enumerate(items):
        _disambiguate(items, index, item)
    return items


def _disambiguate(items: list[_Item], index: int, item: _Item) -> None:
    """Give a word whose kind depends on what follows it its kind in place.

    - "on" before an object is the relation "above" ("a cat on a sofa"), else a filler
      ("on the left", "on a black background" -- the canvas is no object);
    - "in" before an object is a relation the layout cannot show ("a cat in a box"),
      else a filler ("in the top left");
    - a word ending in "-ing" after a noun and before a determiner is a verb ("a dog
      chasing a ball"), not part of the thing ("a grinning cat", "a diamond ring").
    """
    if item.kind == "filler" and item.text in ("on", "in") and _opens_object(items, index + 1):
        item.kind, item.value = (
            ("onrel", ("above", False)) if item.text == "on" else ("norel", None)
        )
    elif (
        item.kind == "unknown"
        and item.text.endswith("ing")
        and len(item.text) >= 5
        and index > 0
        and items[index - 1].kind in _THING
        and index + 1 < len(items)
        and items[index + 1].kind in ("det", "num", "the")
    ):
        item.kind = "verb"


def _opens_object(items: list[_Item], start: int) -> bool:
    """Whether the words from ``start`` form a noun phrase about an object: it reaches a
    thing word before the phrase ends, and that phrase is not about the canvas."""
    seen_thing = False
    for item in items[start:]:
        if item.kind in _THING:
            seen_thing = True
        elif item.kind not in ("det", "the", "num", "size", "colour"):
            return seen_thing and item.kind != "canvas"
    return seen_thing


def _group(items: list[_Item]) -> list[_Element]:
    """Items -> noun phrases, places and the remaining items (fillers dropped)."""
    out: list[_Element] = []
    i = 0
    while i < len(items):
        item = items[i]
        if item.kind == "it":
            out.append(_Phrase([item], pronoun=True, definite=True))
            i += 1
        elif item.kind in _OPENS or item.kind == "neg" and _next_kind(items, i) in _OPENS:
            i = _read_phrase(items, i, out)
        elif item.kind in ("row", "col", "mid"):
            place = _Place([])
            while i < len(items) and items[i].kind in ("row", "col", "mid", "filler"):
                part = items[i]
                if part.kind == "filler" and not (
                    i + 1 < len(items) and items[i + 1].kind in ("row", "col", "mid")
                ):
                    break
                place.items.append(part)
                if part.kind == "row":
                    place.rows.add(part.number())
                elif part.kind == "col":
                    place.cols.add(part.number())
                elif part.kind == "mid":
                    place.mid = True
                i += 1
            out.append(place)
        else:
            if item.kind != "filler":
                out.append(item)
            i += 1
    return out


def _read_phrase(items: list[_Item], i: int, out: list[_Element]) -> int:
    """Read one noun phrase from ``items[i]``; append it (or its loose items) to ``out``.

    A phrase is ``[neg] [det|num|the] (size|colour|word)+ [(of|with) word+]*``: the words no
    lexicon entry knows are the thing ("a small grinning cat" -> size small, thing
    "grinning cat"; "a fluffy red circle" -> colour red, thing "fluffy circle"); a second
    size or colour starts the next phrase.
    """
    phrase = _Phrase([])
    start = i
    while i < len(items):
        item = items[i]
        kind = item.kind
        if item.text == "one" and _is_pronoun_one(items, i, phrase):
            phrase.items.append(item)
            phrase.count = phrase.count or 1
            i += 1
            break
        if kind == "neg" and not phrase.items:
            phrase.negated = True
        elif kind == "bignum" and not phrase.words and phrase.count is None:
            out.append(item)  # "five cats": one cat, and "five" is reported
            i += 1
            continue
        elif kind in ("det", "num", "the") and not (phrase.size or phrase.colour or phrase.words):
            if item.value == "another":
                phrase.another, phrase.count = True, 1
            elif kind != "the":
                phrase.count = item.number()
                phrase.paired = "pair" in item.text
            phrase.definite = phrase.definite or kind == "the"
        elif kind == "size" and phrase.size is None:
            phrase.size = item.word()
        elif kind == "colour" and phrase.colour is None:
            phrase.colour = item.word()  # also after a word: "a fluffy red circle"
        elif kind == "colour" and item.text in NOUN_COLOURS and _next_kind(items, i) not in _THING:
            phrase.words.append(item.text)  # "a green orange"
        elif kind in _THING and not _plural_ends(phrase, item):
            phrase.words.append(item.text)
        elif item.text in ("of", "with") and phrase.words and _next_kind(items, i) in _THING:
            phrase.words.append(item.text)  # "a cup of coffee", "a face with tears of joy"
        else:
            break
        phrase.items.append(item)
        i += 1
    last = phrase.items[-1].text if phrase.items else None
    if last in NOUN_COLOURS and last == phrase.colour and not (phrase.words or phrase.definite):
        phrase.colour, phrase.words = None, [last]  # "an orange"; "the orange" refers back
    if _next_kind(items, i - 1) == "canvas":  # "on a black background": not an object
        for it in phrase.items:
            if it.text in _DEFAULT_CANVAS:
                it.kind = "canvas"  # what the canvas already is: nothing to report
            else:
                out.append(it)
    elif phrase.words or phrase.items and phrase.items[-1].text == "one":
        phrase.finish()
        out.append(phrase)
    else:
        out.extend(phrase.items)  # no thing: the words stay loose (reported if they mean something)
    return max(i, start + 1)


def _plural_ends(phrase: _Phrase, item: _Item) -> bool:
    """Whether a counted phrase ended at its plural word before ``item``: "three
    triangles | zorblax" (but "two sports cars", "two pairs of shoes" read on)."""
    return (
        phrase.count is not None
        and phrase.count > 1
        and bool(phrase.words)
        and is_plural(phrase.words[-1])
        and not is_plural(item.text)
    )


def _next_kind(items: list[_Item], i: int) -> str | None:
    """The kind of ``items[i + 1]``, ``None`` past the end."""
    return items[i + 1].kind if i + 1 < len(items) else None


def _is_pronoun_one(items: list[_Item], i: int, phrase: _Phrase) -> bool:
    """Whether "one" at ``items[i]`` is the head of "the red one" rather than a count:
    it follows a colour or size and no colour, size or thing word follows it."""
    return _next_kind(items, i) not in ("size", "colour", *_THING) and any(
        it.kind in ("size", "colour") for it in phrase.items
    )


class _Reader:
    """Reads the grouped elements sentence by sentence into objects and one relation."""

    def __init__(self) -> None:
        self.objects: list[_Object] = []
        self.mentions: list[tuple[int, int]] = []  # (element index, object index)
        self.resolved: dict[int, int | None] = {}  # element index -> object index
        self.relation: tuple[int, str, int] | None = None
        self.relation_tokens: set[int] = set()
        self.beside: tuple[int, int, set[int]] | None = None
        self.sides: list[tuple[int, _Place]] = []
        self.used: set[int] = set()
        self.dropped_relations: list[set[int]] = []
        self.negatives: list[str] = []

    # ------------------------------------------------------------------ objects
    def resolve(self, index: int, phrase: _Phrase, exclude: int | None = None) -> int | None:
        """The object a phrase names (creating it when new); ``None`` when unresolved."""
        if index in self.resolved and not phrase.pronoun:
            return self.resolved[index]
        found: int | None = None
        if phrase.pronoun or phrase.thing is None and phrase.definite:
            earlier = [obj for pos, obj in reversed(self.mentions) if pos < index]
            for obj in earlier:
                if obj != exclude and self._matches(obj, phrase):
                    found = obj
                    break
        elif phrase.thing is None:  # "a blue one": the last phrase's thing
            earlier = [obj for pos, obj in reversed(self.mentions) if pos < index]
            if earlier and phrase.colour is not None:
                found = self._new_or_merge(
                    phrase, self.objects[earlier[0]].thing, count=phrase.count or 1
                )
        elif phrase.definite:
            matches = [
                obj
                for obj in range(len(self.objects))
                if self._matches(obj, phrase) and obj != exclude
            ]
            # "the cat" named first: a new object
            found = matches[-1] if matches else self._new_or_merge(phrase, phrase.thing, count=1)
        else:
            found = self._new_or_merge(phrase, phrase.thing, count=phrase.count or 1)
        if found is not None:
            self.used |= phrase.tokens
            self.objects[found].tokens |= phrase.tokens
            if phrase.definite and phrase.size and not self.objects[found].size:
                self.objects[found].size = phrase.size
            self.mentions.append((index, found))
        self.resolved[index] = found
        return found

    def _matches(self, obj: int, phrase: _Phrase) -> bool:
        o = self.objects[obj]
        return (
            (
                phrase.thing is None
                or o.thing == phrase.thing
                or o.thing.endswith(" " + phrase.thing)
            )
            and (phrase.colour is None or o.colour == phrase.colour)
            and (phrase.size is None or o.size in (None, phrase.size))
        )

    def _new_or_merge(self, phrase: _Phrase, thing: str, *, count: int) -> int:
        for index, obj in enumerate(self.objects):
            if (obj.colour, obj.thing) == (phrase.colour, thing):
                obj.count = obj.count + count if phrase.another else max(obj.count, count)
                if phrase.size and obj.size != phrase.size:
                    obj.size = None if obj.size else phrase.size
                return index
        self.objects.append(_Object(phrase.colour, thing, count, phrase.size))
        return len(self.objects) - 1

    def negate(self, phrase: _Phrase) -> None:
        """Keep "no circles" as a thing not to draw ("circle")."""
        if phrase.thing is None:
            return
        self.negatives.append(" ".join(w for w in (phrase.colour, phrase.thing) if w))
        self.used |= phrase.tokens

    # --------------------------------------------------------------- sentences
    def read(self, elements: list[_Element], offset: int) -> None:
        """One sentence: ``elements`` with global indices ``offset + i``."""
        phrases = []
        for i, element in enumerate(elements):
            if isinstance(element, _Phrase) and element.negated:
                self.negate(element)
            elif isinstance(element, _Phrase):
                phrases.append(i)
        for i in phrases:
            if not _phrase_at(elements, i).pronoun:
                self.resolve(offset + i, _phrase_at(elements, i))
        for i, element in enumerate(elements):
            if isinstance(element, _Item) and element.kind in ("rel", "onrel"):
                self._relate(elements, offset, i, phrases)
        for i, element in enumerate(elements):
            if isinstance(element, _Place):
                self._place(elements, offset, i, phrases)
        for i in phrases:  # a pronoun nothing used still names an object
            if _phrase_at(elements, i).pronoun and offset + i not in self.resolved:
                self.resolve(offset + i, _phrase_at(elements, i))

    def _relate(self, elements: list[_Element], offset: int, r: int, phrases: list[int]) -> None:
        relation = elements[r]
        assert isinstance(relation, _Item)  # a "rel" item
        name, implied_it = relation.flagged()
        before = [i for i in phrases if i < r]
        after = [i for i in phrases if i > r]
        subject = before[-1] if before else (after[1] if len(after) > 1 else None)
        obj = None if implied_it else (after[0] if after else None)
        if subject is None or relation.kind == "onrel" and (obj is None or obj != r + 1):
            return
        a = self.resolve(offset + subject, _phrase_at(elements, subject))
        if a is None:
            return
        if obj is not None:
            b = self.resolve(offset + obj, _phrase_at(elements, obj), exclude=a)
        else:  # "B with A to its left", "B ... A above": the object before A
            earlier = [o for pos, o in reversed(self.mentions) if o != a]
            b = earlier[0] if earlier else None
        if b is None or a == b:
            return
        tokens = _tokens([relation])
        if name == "beside":
            self.beside = (a, b, tokens)
        elif self.relation is None:
            self.relation = (a, name, b)
            self.relation_tokens = tokens
            self.used |= tokens
        else:
            self.dropped_relations.append(tokens)

    def _place(self, elements: list[_Element], offset: int, p: int, phrases: list[int]) -> None:
        place = elements[p]
        assert isinstance(place, _Place)
        before = [i for i in phrases if i < p]
        after = [i for i in phrases if i > p]
        if before and before[-1] == p - 1:
            target = before[-1]
        elif after and all(
            isinstance(e, _Item) and e.kind == "comma" for e in elements[p + 1 : after[0]]
        ):
            target = after[0]
        elif before:
            target = before[-1]
        else:
            return
        phrase = _phrase_at(elements, target)
        obj = self.resolve(offset + target, phrase)
        if obj is None:
            return
        if phrase.definite and place.side() is not None:
            self.sides.append((obj, place))
            return
        self._set_position(obj, place)

    def _set_position(self, obj: int, place: _Place) -> None:
        cell = place.cell()
        target = self.objects[obj]
        if cell is None or target.position is not None:
            return
        target.position = POSITIONS[cell]
        target.place_tokens = place.tokens

    # --------------------------------------------------------------- the result
    def finish(self) -> ParsedCaption | None:
        singles = [i for i, o in enumerate(self.objects) if o.count == 1]
        for subject, place in self.sides:
            other = 1 - subject
            side = place.side()
            assert side is not None  # only places with a side are kept in self.sides
            claim = (subject, side, other)
            if self.relation is None and len(self.objects) == 2 and len(singles) == 2:
                self.relation = claim
                self.relation_tokens = place.tokens
                self.used |= place.tokens
                if self.beside is not None and {subject, other} == set(self.beside[:2]):
                    self.used |= self.beside[2]
            elif self.relation in (claim, (other, _INVERSE[claim[1]], subject)):
                self.used |= place.tokens  # restates the relation
            else:
                self._set_position(subject, place)
        kept: list[int] = []
        total = 0
        for index, obj in enumerate(self.objects):
            count = min(obj.count, 3)
            if total + count > 3 or len(kept) == 3:
                self.used -= obj.tokens
                continue
            obj.count = count
            total += count
            kept.append(index)
        if self.relation is not None:
            a, _, b = self.relation
            if a not in kept or b not in kept or len(kept) != 2:
                self.used -= self.relation_tokens
                self.relation = None
        for index in kept:
            obj = self.objects[index]
            if obj.position is not None and (obj.count != 1 or self.relation is not None):
                obj.position = None
            elif obj.position is not None:
                self.used |= obj.place_tokens
        if not kept:
            return None
        order = kept
        relation = None
        if self.relation is not None:
            a, relation, b = self.relation
            order = [a, b]
        specs = tuple(
            ObjectSpec(o.colour, o.thing, o.count, o.size, o.position)
            for o in (self.objects[i] for i in order)
        )
        return ParsedCaption(specs, relation)


def understand(prompt: str, learned: Collection[str] | None = None) -> Understanding:
    """Read a free-form prompt onto the caption grammar (see the module docstring).

    Args:
        prompt: any text.
        learned: every thing the model that will draw the prompt learned, where that is
            a closed list (the shapes world's three shapes); ``None``: an open reading,
            nothing to check against.

    Returns:
        :class:`Understanding`: the scene specification (``None`` when no object was
        understood), the prompt's words that were not used, and the things it names
        outside ``learned``.
    """
    tokens = _TOKEN.findall(prompt.lower().replace("-", " ").replace("_", " "))
    items = _lex(tokens)
    elements = _group(items)
    reader = _Reader()
    start = 0
    for i, element in enumerate([*elements, None]):
        if element is None or (isinstance(element, _Item) and element.kind == "break"):
            reader.read(elements[start:i], start)
            start = i + 1
    parsed = reader.finish()
    reportable = _tokens([item for item in items if item.kind not in _NEUTRAL])
    ignored_tokens = sorted(reportable - reader.used)
    ignored: list[str] = []
    previous = None
    for t in ignored_tokens:
        if previous is not None and t == previous + 1:
            ignored[-1] += " " + tokens[t]
        else:
            ignored.append(tokens[t])
        previous = t
    negative = ", ".join(dict.fromkeys(reader.negatives)) or None
    not_learned: tuple[str, ...] = ()
    if parsed is not None and learned is not None:
        not_learned = tuple(
            dict.fromkeys(o.thing for o in parsed.objects if o.thing not in learned)
        )
    return Understanding(prompt, parsed, tuple(ignored), negative, not_learned)


def same_constraints(a: ParsedCaption, b: ParsedCaption) -> bool:
    """Whether two specifications ask for the same scenes: the same object phrases in any
    order, and the same relation read either way ("A left of B" is "B right of A")."""
    if a.relation is None or b.relation is None:
        return a.relation == b.relation and sorted(a.objects, key=repr) == sorted(
            b.objects, key=repr
        )
    if a.objects == b.objects:
        return a.relation == b.relation
    return a.objects == b.objects[::-1] and a.relation == _INVERSE[b.relation]

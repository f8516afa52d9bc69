"""understand: free phrasing onto the caption grammar, and what was ignored.

The paraphrases here are the parser's development set. The held-out paraphrases of
``evaluation/paraphrase_heldout.py`` are never used here (they measure the parser).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.shapes import COLOURS, ObjectSpec, ParsedCaption, compose_caption, parse_caption
from models.shapes.nouns import plural
from models.shapes.splits import FAMILIES, sample_caption
from models.shapes.understand import same_constraints, understand

# ------------------------------------------------------------ hand-written cases
DEVELOPMENT = [
    # the prompts
    ("a big yellow triangle above a small green circle", "a large yellow triangle above a small green circle"),
    ("a cyan square beneath an orange triangle", "a cyan square below an orange triangle"),
    ("a red circle next to a blue square, with the circle on the left", "a red circle to the left of a blue square"),
    ("to the left of a blue square, a red circle", "a red circle to the left of a blue square"),
    # synonyms
    ("A HUGE magenta square", "a large magenta square"),
    ("a little white circle in the middle", "a small white circle in the center"),
    ("one giant green square, centre", "a large green square in the center"),
    ("a tiny blue triangle under a red square", "a small blue triangle below a red square"),
    ("a red square on top of a yellow circle", "a red square above a yellow circle"),
    ("a red square over a white triangle", "a red square above a white triangle"),
    ("a green circle beside an orange square; the square is on the right", "an orange square to the right of a green circle"),
    # numerals, number words, plurals
    ("2 yellow squares", "two yellow squares"),
    ("three big red circles", "three large red circles"),
    ("a couple of cyan triangles and one white circle", "two cyan triangles and a white circle"),
    ("a single orange circle", "an orange circle"),
    # word order, several sentences, pronouns
    ("Below a green square, a magenta triangle.", "a magenta triangle below a green square"),
    ("There is a white square. A blue triangle is above it.", "a blue triangle above a white square"),
    ("a yellow circle with a red square to its right", "a red square to the right of a yellow circle"),
    ("a blue circle and a red one", "a blue circle and a red circle"),
    ("The red circle is left of the green square.", "a red circle to the left of a green square"),
    ("Top-left: a small cyan circle!", "a small cyan circle in the top left"),
    ("an orange square. It sits in the lower right corner.", "an orange square in the bottom right"),
    ("a green triangle, placed at the top", "a green triangle at the top"),
    ("Draw a red circle, a green square and a blue triangle.", "a red circle, a green square and a blue triangle"),
    ("a red circle as well as a white square", "a red circle and a white square"),
    ("the blue square on the left and the red circle on the right", "a blue square to the left of a red circle"),
]  # fmt: skip


@pytest.mark.parametrize(("prompt", "caption"), DEVELOPMENT)
def test_development_paraphrases_read_as_their_caption(prompt, caption):
    understood = understand(prompt)
    assert understood.caption == caption
    assert understood.ignored == ()
    assert understood.complete


@pytest.mark.parametrize(
    ("prompt", "caption", "ignored"),
    [
        ("five red circles", "a red circle", ("five",)),
        ("a red circle and a blue", "a red circle", ("blue",)),  # a colour with no thing
        # "beside" without a side: both objects, no relation, and it says so
        ("a red circle next to a blue square", "a red circle and a blue square", ("next to",)),
        # a relation that the layout cannot show: the objects stay
        ("a red circle behind a blue square", "a red circle and a blue square", ("behind",)),
        # a relation caption fixes no grid cell
        (
            "a red circle in the top left above a blue square",
            "a red circle above a blue square",
            ("top left",),
        ),
        # one relation per caption
        (
            "a red circle left of a blue square, a blue square above a red circle",
            "a red circle to the left of a blue square",
            ("above",),
        ),
        # at most three objects
        (
            "a red circle, a blue square, a green triangle and a white circle",
            "a red circle, a blue square and a green triangle",
            ("white circle",),
        ),
    ],
)
def test_what_cannot_be_read_is_reported_as_ignored(prompt, caption, ignored):
    understood = understand(prompt)
    assert understood.caption == caption
    assert understood.ignored == ignored
    assert not understood.complete


@pytest.mark.parametrize("prompt", ["", "   ", "red", "a big blue!", "draw it, please"])
def test_nothing_understood_without_a_thing(prompt):
    """No noun at all: nothing is planned (the pipeline draws the prompt as written) and
    the colours and sizes it did name are reported."""
    understood = understand(prompt)
    assert understood.parsed is None and understood.caption is None
    assert not understood.complete
    content = [w for w in prompt.lower().replace("!", "").split() if w in ("red", "big", "blue")]
    assert " ".join(understood.ignored).split() == content


# ------------------------------------------------------------------ properties
@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from(("train", "heldout")),
    st.sampled_from(tuple(FAMILIES)),
)
def test_every_grammar_caption_reads_as_itself(seed, split, family):
    caption = compose_caption(sample_caption(np.random.default_rng(seed), split, family=family))
    understood = understand(caption)
    assert understood.caption == caption
    assert understood.ignored == ()


_SIZE = {
    "small": ("tiny", "little", "mini", "small"),
    "large": ("big", "giant", "enormous", "large"),
}
_COUNT = {2: ("2", "two", "a couple of"), 3: ("3", "three")}
_VERTICAL = {0: ("top", "upper"), 2: ("bottom", "lower")}
_NEAR = {"left of": "left", "right of": "right", "above": "top", "below": "bottom"}
_RELATION = {
    "left of": ("is to the left of", "sits left of", "on the left side of"),
    "right of": ("is to the right of", "right of", "on the right side of"),
    "above": ("is above", "sits on top of", "over"),
    "below": ("is below", "beneath", "under"),
}
_INVERSE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}


def _place(position: str, pick) -> str:
    """A development phrasing of a grid position."""
    if position == "center":
        return pick(("in the middle", "in the centre", "at the center"))
    words = " ".join(
        pick(_VERTICAL[0 if w == "top" else 2]) if w in ("top", "bottom") else w
        for w in position.split()
    )
    return pick((f"in the {words}", f"at the {words}", f"{words}", f"in the {words} corner"))


def _phrase(spec: ObjectSpec, pick, *, place: bool = True) -> str:
    size = pick(_SIZE[spec.size]) if spec.size else None
    determiner = pick(_COUNT[spec.count]) if spec.count > 1 else pick(("a", "one", "a single"))
    noun = spec.thing + ("s" if spec.count > 1 else "")
    text = " ".join(w for w in (determiner, size, spec.colour, noun) if w)
    if place and spec.position:
        text += pick((" ", ", ", " placed ")) + _place(spec.position, pick)
    return text


def development_paraphrase(parsed: ParsedCaption, rng: np.random.Generator) -> str:
    """One development phrasing of ``parsed`` (templates of this file only)."""

    def pick(options):
        return options[rng.integers(len(options))]

    if parsed.relation is not None:
        a, b = (_phrase(s, pick) for s in parsed.objects)
        rel = parsed.relation
        frame = rng.integers(5)
        if frame == 0:
            text = f"{a} {pick(_RELATION[rel])} {b}"
        elif frame == 1:
            text = f"{b} {pick(_RELATION[_INVERSE[rel]])} {a}"
        elif frame == 2:
            text = f"{pick(_RELATION[rel]).removeprefix('is ').removeprefix('sits ')} {b}: {a}"
        elif frame == 3:
            text = f"draw {b}. {a} {pick(_RELATION[rel])} it"
        else:
            first, second = parsed.objects
            ref = f"the {first.colour} one" if first.thing == second.thing else f"the {first.thing}"
            text = f"{a} beside {b}; {ref} is on the {_NEAR[rel]}"
    else:
        phrases = [_phrase(s, pick) for s in parsed.objects]
        if len(phrases) == 1:
            text = pick(("{}", "please draw {}", "{} on a black background")).format(phrases[0])
        else:
            order = rng.permutation(len(phrases))
            phrases = [phrases[i] for i in order]
            frame = rng.integers(3)
            if frame == 0:
                text = (
                    ", ".join(phrases[:-1])
                    + pick((" and ", " as well as ", " along with "))
                    + phrases[-1]
                )
            elif frame == 1:
                text = ". ".join(phrases)
            else:
                text = "draw " + " with ".join(phrases)
    return text.capitalize() + pick(("", ".", "!"))


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(tuple(FAMILIES)))
def test_a_paraphrase_of_a_scene_reads_as_the_same_scene(seed, family):
    rng = np.random.default_rng(seed)
    parsed = sample_caption(rng, "heldout", family=family)
    prompt = development_paraphrase(parsed, rng)
    understood = understand(prompt)
    assert understood.parsed is not None, prompt
    assert same_constraints(understood.parsed, parsed), (prompt, understood.caption)
    assert understood.ignored == (), prompt


_UNKNOWN = ("zorblax", "quickly", "photograph", "wobbly", "kitten", "velvet")


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(_UNKNOWN), st.data())
def test_an_unknown_word_is_never_lost(seed, word, data):
    """A word no list knows is read as (part of) a thing, or reported: never dropped."""
    caption = compose_caption(sample_caption(np.random.default_rng(seed), "heldout"))
    words = caption.split()
    # between phrases, or inside one before its colour (not inside "to the left of")
    gaps = [i for i, w in enumerate(words) if w in ("a", "an", "two", "three", *COLOURS)]
    where = data.draw(st.sampled_from([*gaps, len(words)]))
    prompt = " ".join([*words[:where], word, *words[where:]])
    understood = understand(prompt)
    kept = re.findall(r"[a-z]+", f"{understood.caption} {understood.ignored}")
    assert word in kept or word == "photograph", prompt  # "photograph" is about the canvas


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        (
            "a red circle to the left of a blue square",
            "a blue square to the right of a red circle",
            True,
        ),
        (
            "a red circle to the left of a blue square",
            "a blue square to the left of a red circle",
            False,
        ),
        ("a red circle and two blue squares", "two blue squares and a red circle", True),
        ("a red circle and a blue square", "a red circle above a blue square", False),
    ],
)
def test_same_constraints_reads_relations_both_ways_and_lists_in_any_order(first, second, same):
    assert same_constraints(parse_caption(first), parse_caption(second)) is same


# ------------------------------------------------------------- open noun phrases
@pytest.mark.parametrize(
    ("prompt", "caption", "ignored"),
    [
        ("a cat on a sofa", "a cat above a sofa", ()),
        ("a red apple", "a red apple", ()),
        # purple is no palette colour: it stays in the thing, for the text encoder
        ("a purple star", "a purple star", ()),
        ("two blue squares above a green triangle", "two blue squares above a green triangle", ()),
        ("an automobile", "an automobile", ()),
        # a counted object takes no place (as for shapes)
        ("three tiny kittens in the top left", "three small kittens", ("top left",)),
        (
            "A tiny green triangle on top of a big yellow square.",
            "a small green triangle above a large yellow square",
            (),
        ),
        ("two mice under a wooden table", "two mice below a wooden table", ()),
        ("a fluffy red circle", "a red fluffy circle", ()),
        (
            "a big red grinning cat in the top right",
            "a large red grinning cat in the top right",
            (),
        ),
        ("a kitten beside a puppy, the kitten on the left", "a kitten to the left of a puppy", ()),
        ("the dog is over the moon", "a dog above a moon", ()),
        ("a cup of coffee", "a cup of coffee", ()),
        # "with" and no determiner joins a thing (CLDR names); with one, it adds an object
        ("a face with tears of joy", "a face with tears of joy", ()),
        ("two cats with wry smiles", "two cats with wry smiles", ()),
        ("a cat with a hat", "a cat and a hat", ()),
        # a pair is two of a thing, or one pair of what has no singular; never two pairs
        ("a pair of shoes", "two shoes", ()),
        ("a pair of glasses", "a pair of glasses", ()),
        ("glasses", "a pair of glasses", ()),
        ("two pairs of socks", "two pairs of socks", ()),
        ("cats", "a cat", ()),  # a bare plural is one, as "red circles" always was
        # relations the 3x3 layout cannot show: the objects stay, the words are reported
        ("a cat in front of a dog", "a cat and a dog", ("in front of",)),
        ("a ball behind a chair", "a ball and a chair", ("behind",)),
        ("a cat in a box", "a cat and a box", ("in",)),
        ("a dog chasing a ball", "a dog and a ball", ("chasing",)),
        ("a red circle on a black background", "a red circle", ()),
        ("a rocket on a white background", "a rocket", ("white",)),
        # the whole prompt as one thing when it is one word no list knows
        ("hello", "a hello", ()),
    ],
)
def test_open_phrases(prompt, caption, ignored):
    understood = understand(prompt)
    assert understood.caption == caption
    assert understood.ignored == ignored
    assert understood.negative is None


def test_a_colour_from_the_palette_is_the_colour_and_other_words_the_thing():
    (apple,) = understand("a red apple").parsed.objects
    assert (apple.colour, apple.thing, apple.count) == ("red", "apple", 1)
    (star,) = understand("a purple star").parsed.objects
    assert (star.colour, star.thing) == (None, "purple star")
    squares, triangle = understand("two blue squares above a green triangle").parsed.objects
    assert (squares.colour, squares.thing, squares.count) == ("blue", "square", 2)
    assert (triangle.colour, triangle.thing, triangle.count) == ("green", "triangle", 1)


@pytest.mark.parametrize(
    ("prompt", "caption", "negative"),
    [
        ("no circles, just a square", "a square", "circle"),
        ("a cat without a hat", "a cat", "hat"),
        ("a red apple, not a green one", "a red apple", None),
        ("two dogs and no red balls", "two dogs", "red ball"),
        ("a sofa. No cats, no dogs.", "a sofa", "cat, dog"),
    ],
)
def test_negation_is_a_negative_prompt_not_an_object(prompt, caption, negative):
    understood = understand(prompt)
    assert understood.caption == caption
    assert understood.negative == negative
    if negative is not None:
        assert understood.ignored == ()


_NOUNS = (
    "cat", "dog", "sofa", "apple", "rocket", "pizza", "kitten", "puppy", "automobile",
    "mouse", "person", "child", "knife", "bus", "cactus", "octopus", "fish", "umbrella",
    "sailboat", "banana", "tree", "house", "guitar", "robot", "bicycle", "teapot",
    "star", "moon", "hat", "box", "circle", "square", "triangle",
)  # fmt: skip
_ADJECTIVES = ("grinning", "wooden", "purple", "shiny", "striped", "old", "cute")
_RELATION_WORDS = ("on", "on top of", "over", "under", "beneath", "above", "below",
                   "to the left of", "to the right of", "next to", "and", "with")  # fmt: skip


@st.composite
def noun_phrase_prompts(draw):
    """A prompt of 1 to 3 noun phrases of distinct nouns, with their colours and counts."""
    nouns = draw(st.lists(st.sampled_from(_NOUNS), min_size=1, max_size=3, unique=True))
    counts = [1] * len(nouns)
    if draw(st.booleans()):
        counts[0] = draw(st.integers(1, 4 - len(nouns)))
    phrases, expected = [], []
    for noun, count in zip(nouns, counts, strict=True):
        colour = draw(st.one_of(st.none(), st.sampled_from(COLOURS)))
        adjective = draw(st.one_of(st.none(), st.sampled_from(_ADJECTIVES)))
        written = noun if count == 1 else plural(noun)
        determiner = {1: draw(st.sampled_from(("a", "one", "the"))), 2: "two", 3: "three"}[count]
        phrases.append(" ".join(w for w in (determiner, colour, adjective, written) if w))
        expected.append((colour, " ".join(w for w in (adjective, noun) if w), count))
    joints = [draw(st.sampled_from(_RELATION_WORDS)) for _ in phrases[1:]]
    prompt = phrases[0] + "".join(f" {j} {p}" for j, p in zip(joints, phrases[1:], strict=True))
    return prompt, nouns, expected


@settings(max_examples=200, deadline=None)
@given(noun_phrase_prompts())
def test_no_noun_is_ever_ignored_and_counts_and_colours_stay_exact(case):
    prompt, nouns, expected = case
    understood = understand(prompt)
    ignored_words = " ".join(understood.ignored).split()
    assert not set(nouns) & set(ignored_words), (prompt, understood.ignored)
    assert understood.parsed is not None, prompt
    read = [(s.colour, s.thing, s.count) for s in understood.parsed.objects]
    assert sorted(read, key=str) == sorted(expected, key=str), prompt


@settings(max_examples=200, deadline=None)
@given(noun_phrase_prompts(), st.sets(st.sampled_from(_NOUNS)))
def test_the_things_outside_what_a_model_learned_are_named_and_still_drawn(case, learned):
    """``not_learned``: each understood thing outside ``learned``, once, in the order the
    caption names them; the reading is otherwise the same, and open without a list."""
    prompt, _, _ = case
    openly, checked = understand(prompt), understand(prompt, learned)
    assert openly.not_learned == ()
    assert (checked.parsed, checked.ignored, checked.negative) == (
        openly.parsed,
        openly.ignored,
        openly.negative,
    )
    things = [spec.thing for spec in checked.parsed.objects]
    outside = [thing for thing in things if thing not in learned]
    assert list(checked.not_learned) == list(dict.fromkeys(outside))


_WORDS = (
    "a", "an", "the", "two", "three", "2", "five", "no", "on", "in", "of", "under", "over",
    "above", "left", "right", "top", "center", "red", "blue", "small", "big", "cat", "cats",
    "mice", "pair", "pairs", "glasses", "shoes", "with", "and", ",", ".", "is", "behind",
    "front", "it", "one", "another", "sofa", "lens", "buses", "cactus", "octopi", "chasing",
    "background",
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(st.sampled_from(_WORDS), st.from_regex(r"[a-z]{1,6}", fullmatch=True)),
        max_size=10,
    )
)
def test_any_words_read_into_a_caption_that_parses_back(words):
    understood = understand(" ".join(words))
    if understood.parsed is not None:
        assert parse_caption(understood.caption) == understood.parsed


@pytest.mark.parametrize(
    ("prompt", "colour", "thing"),
    [
        ("an orange", None, "orange"),
        ("a green orange", "green", "orange"),
        ("an orange cat", "orange", "cat"),
        ("two oranges", None, "orange"),
    ],
)
def test_orange_is_a_colour_before_a_thing_and_a_thing_at_the_end(prompt, colour, thing):
    (spec,) = understand(prompt).parsed.objects
    assert (spec.colour, spec.thing) == (colour, thing)


def test_the_orange_one_still_refers_back():
    understood = understand("a blue square and an orange square; the orange one is on the left")
    assert understood.caption == "an orange square to the left of a blue square"

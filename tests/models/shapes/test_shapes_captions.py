"""Caption templates and their parser: exact round trips and clear errors."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from models.shapes import (
    COLOURS,
    FAMILIES,
    POSITIONS,
    RELATIONS,
    SHAPES,
    SIZES,
    ObjectSpec,
    ParsedCaption,
    compose_caption,
    parse_caption,
    sample_caption,
)
from models.shapes.captions import GRAMMAR_WORDS

pairs = st.tuples(st.sampled_from(COLOURS), st.sampled_from(SHAPES))
sizes = st.one_of(st.none(), st.sampled_from(SIZES))


@st.composite
def parsed_captions(draw) -> ParsedCaption:
    """Any caption the grammar allows, built from independent draws."""
    family = draw(st.sampled_from(tuple(FAMILIES)))
    if family == "single":
        colour, shape = draw(pairs)
        position = draw(st.one_of(st.none(), st.sampled_from(POSITIONS)))
        return ParsedCaption((ObjectSpec(colour, shape, size=draw(sizes), position=position),))
    if family == "relation":
        chosen = draw(st.lists(pairs, min_size=2, max_size=2, unique=True))
        specs = tuple(ObjectSpec(c, s, size=draw(sizes)) for c, s in chosen)
        return ParsedCaption(specs, draw(st.sampled_from(RELATIONS)))
    counts = draw(st.sampled_from([(1, 1), (1, 1, 1), (2,), (3,), (2, 1), (1, 2)]))
    chosen = draw(st.lists(pairs, min_size=len(counts), max_size=len(counts), unique=True))
    specs = tuple(
        ObjectSpec(c, s, count=n, size=draw(sizes))
        for (c, s), n in zip(chosen, counts, strict=True)
    )
    return ParsedCaption(specs)


@given(parsed_captions())
@settings(max_examples=300, deadline=None)
def test_parse_inverts_compose(parsed):
    assert parse_caption(compose_caption(parsed)) == parsed


@pytest.mark.parametrize("family", tuple(FAMILIES))
def test_sampled_captions_round_trip(family):
    rng = np.random.default_rng(0)
    for _ in range(200):
        parsed = sample_caption(rng, "train", family=family)
        caption = compose_caption(parsed)
        assert parse_caption(caption) == parsed
        assert compose_caption(parse_caption(caption)) == caption


@pytest.mark.parametrize(
    ("caption", "expected"),
    [
        (
            "a small red circle in the top left",
            ParsedCaption((ObjectSpec("red", "circle", size="small", position="top left"),)),
        ),
        (
            "a blue square and a yellow triangle",
            ParsedCaption((ObjectSpec("blue", "square"), ObjectSpec("yellow", "triangle"))),
        ),
        ("two green circles", ParsedCaption((ObjectSpec("green", "circle", count=2),))),
        (
            "a red circle to the left of a white square",
            ParsedCaption((ObjectSpec("red", "circle"), ObjectSpec("white", "square")), "left of"),
        ),
        (
            "an orange triangle below a large cyan circle",
            ParsedCaption(
                (ObjectSpec("orange", "triangle"), ObjectSpec("cyan", "circle", size="large")),
                "below",
            ),
        ),
        (
            "  A Magenta Square  at the bottom ",
            ParsedCaption((ObjectSpec("magenta", "square", position="bottom"),)),
        ),
    ],
)
def test_issue_examples_parse(caption, expected):
    assert parse_caption(caption) == expected


def test_article_agrees_with_next_word():
    assert compose_caption(ParsedCaption((ObjectSpec("orange", "circle"),))) == "an orange circle"
    spec = ObjectSpec("orange", "circle", size="large")
    assert compose_caption(ParsedCaption((spec,))) == "a large orange circle"


@pytest.mark.parametrize(
    "caption",
    [
        "",
        "a red",  # no thing
        "a small",
        "a red blue circle",  # a palette colour is never part of a thing
        "a red and",
        "two red circle",
        "a red circles",
        "four red circles",
        "a red circle left of a blue square",
        "a red circle above a blue square below a green circle",
        "a red circle and a red circle",
        "two red circles and two blue squares",
        "two red circles in the center",
        "a red circle in the center to the left of a blue square",
        "a red circle in the middle",
    ],
)
def test_captions_outside_the_grammar_are_rejected(caption):
    with pytest.raises(ValueError):
        parse_caption(caption)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"colour": "purple", "thing": "circle"},
        {"colour": "red", "thing": ""},
        {"colour": "red", "thing": "Star"},
        {"colour": "red", "thing": "green star"},
        {"colour": "red", "thing": "star  fish"},
        {"colour": "red", "thing": "circles"},  # a single object's thing is singular
        {"colour": "red", "thing": "circle", "count": 4},
        {"colour": "red", "thing": "circle", "size": "huge"},
        {"colour": "red", "thing": "circle", "position": "middle"},
        {"colour": "red", "thing": "circle", "count": 2, "position": "top"},
    ],
)
def test_object_spec_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        ObjectSpec(**kwargs)


def test_unknown_family_is_rejected():
    with pytest.raises(ValueError, match="family"):
        sample_caption(np.random.default_rng(0), "train", family="poem")


# ------------------------------------------------------------------ open things
#: Heads with regular, irregular, unchanged and "-s" singular plurals, and compounds.
HEADS = (
    "cat", "mouse", "person", "child", "knife", "leaf", "bus", "cactus", "octopus", "fish",
    "sheep", "potato", "box", "apple", "umbrella", "unicorn", "hour", "pizza", "dress",
    "tooth", "goose", "pair of shoes", "pair of glasses", "cup of coffee", "man in tuxedo",
)  # fmt: skip
modifiers = st.from_regex(r"[a-z]{3,9}", fullmatch=True).filter(
    lambda w: w not in GRAMMAR_WORDS and w not in ("of", "in")
)
things = st.builds(
    lambda mods, head: " ".join([*mods, head]),
    st.lists(modifiers, max_size=2),
    st.sampled_from(HEADS),
)
colours = st.one_of(st.none(), st.sampled_from(COLOURS))


@st.composite
def open_captions(draw) -> ParsedCaption:
    """Any caption the grammar allows with open things (counts also in relations)."""
    relation = draw(st.one_of(st.none(), st.sampled_from(RELATIONS)))
    counts = draw(
        st.sampled_from(
            [(1, 1), (2, 1), (1, 2)]
            if relation
            else [(1,), (2,), (3,), (1, 1), (1, 1, 1), (2, 1), (1, 2)]
        )
    )
    specs = []
    for count in counts:
        position = None
        if count == 1 and relation is None:
            position = draw(st.one_of(st.none(), st.sampled_from(POSITIONS)))
        spec = ObjectSpec(draw(colours), draw(things), count, draw(sizes), position)
        specs.append(spec)
    assume(len({spec.pair for spec in specs}) == len(specs))
    return ParsedCaption(tuple(specs), relation)


@given(open_captions())
@settings(max_examples=300, deadline=None)
def test_parse_inverts_compose_for_open_things(parsed):
    caption = compose_caption(parsed)
    assert parse_caption(caption) == parsed
    assert compose_caption(parse_caption(caption)) == caption


@pytest.mark.parametrize(
    ("caption", "expected"),
    [
        ("a red apple", ParsedCaption((ObjectSpec("red", "apple"),))),
        ("a purple star", ParsedCaption((ObjectSpec(None, "purple star"),))),
        ("two mice", ParsedCaption((ObjectSpec(None, "mouse", count=2),))),
        ("three small buses", ParsedCaption((ObjectSpec(None, "bus", count=3, size="small"),))),
        ("a pair of glasses", ParsedCaption((ObjectSpec(None, "pair of glasses"),))),
        ("two pairs of shoes", ParsedCaption((ObjectSpec(None, "pair of shoes", count=2),))),
        (
            "a man in tuxedo in the top left",
            ParsedCaption((ObjectSpec(None, "man in tuxedo", position="top left"),)),
        ),
        (
            "a cat above a sofa",
            ParsedCaption((ObjectSpec(None, "cat"), ObjectSpec(None, "sofa")), "above"),
        ),
        (
            "two blue squares above a green triangle",
            ParsedCaption(
                (ObjectSpec("blue", "square", count=2), ObjectSpec("green", "triangle")), "above"
            ),
        ),
    ],
)
def test_open_captions_parse(caption, expected):
    assert parse_caption(caption) == expected
    assert compose_caption(expected) == caption


def test_articles_follow_the_sound_of_the_next_word():
    written = [
        compose_caption(ParsedCaption((ObjectSpec(None, thing),)))
        for thing in ("apple", "unicorn", "hour", "cat")
    ]
    assert written == ["an apple", "a unicorn", "an hour", "a cat"]


@pytest.mark.parametrize("caption", ["a cats", "two mouse", "a glasses", "two cat and a dog"])
def test_number_and_open_noun_must_agree(caption):
    with pytest.raises(ValueError):
        parse_caption(caption)

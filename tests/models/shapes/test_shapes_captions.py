"""Caption templates and their parser: exact round trips and clear errors."""

import numpy as np
import pytest
from hypothesis import given, settings
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
        "a purple circle",
        "a red hexagon",
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
        {"colour": "purple", "shape": "circle"},
        {"colour": "red", "shape": "star"},
        {"colour": "red", "shape": "circle", "count": 4},
        {"colour": "red", "shape": "circle", "size": "huge"},
        {"colour": "red", "shape": "circle", "position": "middle"},
        {"colour": "red", "shape": "circle", "count": 2, "position": "top"},
    ],
)
def test_object_spec_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        ObjectSpec(**kwargs)


def test_unknown_family_is_rejected():
    with pytest.raises(ValueError, match="family"):
        sample_caption(np.random.default_rng(0), "train", family="poem")

"""The curated vocabulary: its size, uniqueness and the curation rules, as properties."""

import re

import emoji

from models.things import thing, thing_keys, things
from models.things.vocab import KEPT_FLAGS, MAX_EMOJI_VERSION, _candidates

EMOJI_THINGS = [t for t in things() if not t.is_shape]


def test_at_least_a_thousand_distinct_things_with_unique_names_and_keys():
    assert len(EMOJI_THINGS) >= 1000
    names = [t.name for t in things()]
    assert len(set(names)) == len(names)
    assert len(set(thing_keys())) == len(thing_keys())
    assert len({t.emoji for t in EMOJI_THINGS}) == len(EMOJI_THINGS)


def test_the_shapes_are_things_drawn_procedurally():
    assert [t.key for t in things()[:3]] == ["circle", "square", "triangle"]
    assert all(thing(k).emoji is None and thing(k).category == "shape" for k in thing_keys()[:3])
    # no emoji takes a shape's word
    assert not [
        t.name for t in EMOJI_THINGS if {"circle", "square", "triangle"} & set(t.name.split())
    ]


def test_no_skin_tones_hair_keycaps_or_unsupported_emoji():
    for t in EMOJI_THINGS:
        points = [ord(c) for c in t.emoji]
        assert not any(0x1F3FB <= p <= 0x1F3FF for p in points), t.name
        assert not any(0x1F9B0 <= p <= 0x1F9B3 for p in points), t.name
        assert 0x20E3 not in points, t.name
        data = emoji.EMOJI_DATA[t.emoji]
        assert data["status"] == emoji.STATUS["fully_qualified"]
        assert data["E"] <= MAX_EMOJI_VERSION


def test_merges_leave_one_clock_a_handful_of_flags_and_one_family():
    names = {t.name for t in EMOJI_THINGS}
    assert "clock" in names and not [n for n in names if re.search(r"o'clock|-thirty", n)]
    country = [t for t in EMOJI_THINGS if any(0x1F1E6 <= ord(c) <= 0x1F1FF for c in t.emoji)]
    assert len(country) == len(KEPT_FLAGS)
    assert {"family", "kiss", "couple with heart"} <= names
    assert not [n for n in names if n.startswith(("family ", "kiss ", "couple with heart "))]


def test_gender_variants_merge_into_the_neutral_thing():
    names = {t.name for t in EMOJI_THINGS}
    assert {"person running", "health worker", "people wrestling"} <= names
    assert not {"woman running", "man running", "man health worker", "women wrestling"} & names
    assert {"man", "woman", "person"} <= names  # the bare words stay


def test_colour_series_merge_into_one_thing():
    names = {t.name for t in EMOJI_THINGS}
    assert {"heart", "book"} <= names
    assert not {"red heart", "blue heart", "green book", "blue book"} & names
    assert {"red apple", "green apple"} <= names  # two of a series are two things


def test_aliases_are_plain_words_claimed_by_one_thing():
    owners: dict[str, str] = {}
    names = {t.name for t in things()}
    for t in things():
        for alias in t.aliases:
            assert re.fullmatch(r"[a-z' -]{3,}", alias), alias
            assert alias != t.name and alias not in names
            assert owners.setdefault(alias, t.key) == t.key
    assert sum(bool(t.aliases) for t in EMOJI_THINGS) > 300
    assert "ramen" in thing("steaming_bowl").aliases


def test_curation_is_deterministic():
    assert _candidates() == _candidates()
    assert things.__wrapped__() == things()

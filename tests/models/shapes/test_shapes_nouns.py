"""Singular and plural forms of things: irregulars, compounds, and the guards around inflect."""

import pytest

from models.shapes.nouns import as_counted, countable, head_word, is_plural, plural, singular


@pytest.mark.parametrize(
    ("one", "many"),
    [
        ("cat", "cats"),
        ("mouse", "mice"),
        ("person", "people"),
        ("knife", "knives"),
        ("fish", "fish"),
        ("bus", "buses"),
        ("cactus", "cactuses"),
        ("grinning cat", "grinning cats"),
        ("pair of shoes", "pairs of shoes"),
        ("cup of coffee", "cups of coffee"),
    ],
)
def test_plural_and_singular_invert_each_other(one, many):
    assert plural(one) == many
    assert singular(many) == one
    assert countable(one)


@pytest.mark.parametrize(
    ("word", "plural_"),
    [
        ("cats", True),
        ("mice", True),
        ("glasses", True),
        ("bus", False),
        ("cactus", False),
        ("glass", False),
        ("lens", False),
        ("fish", False),
        ("apple", False),
    ],
)
def test_a_word_read_without_a_number_is_plural_only_when_it_surely_is(word, plural_):
    assert is_plural(word) is plural_


def test_a_plurale_tantum_is_counted_in_pairs():
    assert as_counted("glasses") == "pair of glasses"
    assert as_counted("reading glasses") == "pair of reading glasses"
    assert as_counted("glass") == "glass"
    assert singular("glasses") == "glasses"  # no "glass" (that is another thing)
    assert head_word("pair of reading glasses") == "pair"

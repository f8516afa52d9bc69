"""Singular and plural forms of things: irregulars, compounds, and the guards around inflect."""

import subprocess
import sys
from pathlib import Path

import pytest

from models.shapes import nouns

REPO = Path(__file__).resolve().parents[3]


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
        ("face with tears of joy", "faces with tears of joy"),
        ("sun behind cloud", "suns behind cloud"),
        ("person running", "people running"),
        ("man dancing", "men dancing"),
        ("leaf fluttering in wind", "leaves fluttering in wind"),
        ("mouse trap", "mouse traps"),
        ("snowman", "snowmen"),
        ("burrito", "burritos"),
        ("potato", "potatoes"),
        ("sushi", "sushi"),
    ],
)
def test_plural_and_singular_invert_each_other(one, many):
    assert nouns.plural(one) == many
    assert nouns.singular(many) == one
    assert nouns.countable(one)


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
    assert nouns.is_plural(word) is plural_


def test_a_plurale_tantum_is_counted_in_pairs():
    assert nouns.as_counted("glasses") == "pair of glasses"
    assert nouns.as_counted("reading glasses") == "pair of reading glasses"
    assert nouns.as_counted("glass") == "glass"
    assert nouns.singular("glasses") == "glasses"  # no "glass" (that is another thing)
    assert nouns.head_word("pair of reading glasses") == "pair"


def test_a_plural_head_stays_plural():
    for noun in ("people holding hands", "scissors", "dice", "jeans"):
        assert nouns.plural(noun) == noun


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [("apple", "an"), ("rocket", "a"), ("unicorn", "a"), ("hourglass", "an"), ("x-ray", "an")],
)
def test_the_indefinite_article_goes_by_sound(phrase, expected):
    assert nouns.article(phrase) == expected


def test_inflect_is_imported_by_the_first_word_form_not_by_importing_the_project():
    """``inflect`` takes seconds to import: ``atelier --help``, the service and the
    prompt reader start without it, and the first word form asked for loads it."""
    code = (
        "import sys, service.app, service.cli, models.dit.pipeline, models.shapes.understand\n"
        "before = 'inflect' in sys.modules\n"
        "from models.shapes.nouns import plural\n"
        "print(before, plural('mouse'), 'inflect' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "mice", "True"]

"""Caption composition: determiners, plurals, frames and the grammar's rules."""

import pytest

from models.things import ThingCaption, ThingSpec, compose_caption


def test_compose_writes_the_layout_words_of_the_shapes_grammar():
    single = ThingSpec("red_apple", "red apple", size="small", position="top left")
    assert compose_caption(ThingCaption((single,))) == "a small red apple in the top left"
    framed = ThingCaption((ThingSpec("rocket", "rocket", colour="blue"),), frame="a picture of {}")
    assert compose_caption(framed) == "a picture of a blue rocket"
    counted = ThingCaption((ThingSpec("cat", "cat", count=2), ThingSpec("dog", "dog")))
    assert compose_caption(counted) == "two cats and a dog"
    three = ThingCaption(tuple(ThingSpec(k, k) for k in ("cat", "dog", "pizza")))
    assert compose_caption(three) == "a cat, a dog and a pizza"
    related = ThingCaption((ThingSpec("rocket", "rocket"), ThingSpec("pizza", "pizza")), "left of")
    assert compose_caption(related) == "a rocket to the left of a pizza"


@pytest.mark.parametrize(
    "build",
    [
        lambda: ThingSpec("cat", "cat", count=4),
        lambda: ThingSpec("cat", "cat", colour="white"),
        lambda: ThingSpec("cat", "cat", count=2, position="top"),
        lambda: ThingCaption((ThingSpec("cat", "cat"), ThingSpec("cat", "kitty"))),
        lambda: ThingCaption((ThingSpec("cat", "cat", count=3), ThingSpec("dog", "dog", count=2))),
        lambda: ThingCaption((ThingSpec("cat", "cat", count=2),), frame="a picture of {}"),
        lambda: ThingCaption((ThingSpec("cat", "cat", count=2), ThingSpec("dog", "dog")), "above"),
    ],
)
def test_captions_outside_the_grammar_are_refused(build):
    with pytest.raises(ValueError):
        build()

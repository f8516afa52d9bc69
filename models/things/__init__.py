"""Everyday things at 64 px: a curated emoji vocabulary, scenes, captions and a data set.

The data is made at training time from the Noto Color Emoji font (Debian
``fonts-noto-color-emoji``; ``$ATELIER_EMOJI_FONT`` overrides the path) and the CLDR names
of the ``emoji`` package, plus the coloured-shapes world of :mod:`models.shapes`.

Public API::

    things() -> tuple[Thing, ...]            # >= 1,000 curated things (+ circle, square, triangle)
    thing(key) -> Thing                      # .key, .name, .emoji, .aliases, .category
    ThingsDataset(split="train", *, seed=0, length=..., image_size=64, shapes_share=0.1)
    sample_scene(rng, split) -> ThingScene   # .objects, .caption, .background, .kind
    draw(scene) -> uint8 (64, 64, 3)
    compose_caption(ThingCaption) -> str     # the one writer of captions
    training_phrasings(thing), heldout_phrasings(thing), colour_heldout(key, colour)
    font_path() -> Path                      # FontMissingError when the font is absent
"""

from models.shapes.nouns import plural  # one grammar: the nouns module owns plurals
from models.things.captions import (
    FRAMES,
    ThingCaption,
    ThingSpec,
    compose_caption,
    object_phrase,
)
from models.things.dataset import ThingsDataset
from models.things.render import (
    THING_COLOURS,
    THING_HUES,
    FontMissingError,
    colourable,
    dominant_hue,
    font_path,
    sprite_pixels,
)
from models.things.scenes import (
    BACKGROUNDS,
    CANVAS,
    PlacedThing,
    ThingScene,
    draw,
    draw_float,
    layout,
    relation_holds,
    sample_caption,
    sample_scene,
    subset_pool,
)
from models.things.splits import (
    HELDOUT_PARAPHRASES,
    colour_heldout,
    heldout_phrasings,
    heldout_things,
    training_phrasings,
)
from models.things.vocab import Thing, thing, thing_keys, things

__all__ = [
    "BACKGROUNDS",
    "CANVAS",
    "FRAMES",
    "HELDOUT_PARAPHRASES",
    "THING_COLOURS",
    "THING_HUES",
    "FontMissingError",
    "PlacedThing",
    "Thing",
    "ThingCaption",
    "ThingScene",
    "ThingSpec",
    "ThingsDataset",
    "colour_heldout",
    "colourable",
    "compose_caption",
    "dominant_hue",
    "draw",
    "draw_float",
    "font_path",
    "heldout_phrasings",
    "heldout_things",
    "layout",
    "object_phrase",
    "plural",
    "relation_holds",
    "sample_caption",
    "sample_scene",
    "subset_pool",
    "sprite_pixels",
    "thing",
    "thing_keys",
    "things",
    "training_phrasings",
]

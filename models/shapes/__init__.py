"""The captioned-shapes world: scenes, captions, renders and a held-out split.

Public API::

    ShapesDataset(split="train", *, seed=0, length=100_000)   # (image (3,32,32), caption)
    sample_scene(rng, split) -> Scene                          # .objects, .caption
    render(scene) -> uint8 (32, 32, 3)
    eval_prompts(n=200, seed=0, split="heldout") -> list[str]
    parse_caption(caption) -> ParsedCaption
"""

from models.shapes.captions import (
    RELATIONS,
    ObjectSpec,
    ParsedCaption,
    compose_caption,
    parse_caption,
)
from models.shapes.dataset import ShapesDataset, to_tensor
from models.shapes.render import render
from models.shapes.scenes import layout, sample_scene
from models.shapes.splits import (
    FAMILIES,
    HELDOUT_PAIRS,
    TRAIN_PAIRS,
    eval_prompts,
    sample_caption,
)
from models.shapes.vocab import COLOURS, PALETTE, POSITIONS, SHAPES, SIZES, Scene, SceneObject

__all__ = [
    "COLOURS",
    "FAMILIES",
    "HELDOUT_PAIRS",
    "PALETTE",
    "POSITIONS",
    "RELATIONS",
    "SHAPES",
    "SIZES",
    "TRAIN_PAIRS",
    "ObjectSpec",
    "ParsedCaption",
    "Scene",
    "SceneObject",
    "ShapesDataset",
    "compose_caption",
    "eval_prompts",
    "layout",
    "parse_caption",
    "render",
    "sample_caption",
    "sample_scene",
    "to_tensor",
]

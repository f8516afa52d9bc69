"""The captioned-shapes world: scenes, captions, renders, a held-out split and a scorer.

Public API::

    ShapesDataset(split="train", *, seed=0, length=100_000)   # (image (3,32,32), caption)
    sample_scene(rng, split) -> Scene                          # .objects, .caption
    render(scene) -> uint8 (32, 32, 3)
    eval_prompts(n=200, seed=0, split="heldout") -> list[str]
    parse_caption(caption) -> ParsedCaption
    score_image(image, caption) -> ScoreResult                 # .ok and per category
    evaluate_images(images, captions) -> EvalReport            # shares, overall and per category
"""

from models.shapes.captions import (
    RELATIONS,
    ObjectSpec,
    ParsedCaption,
    compose_caption,
    parse_caption,
)
from models.shapes.dataset import ShapesDataset, to_tensor
from models.shapes.evaluate import CATEGORIES, EvalReport, evaluate_images, summarize
from models.shapes.render import render
from models.shapes.scenes import layout, sample_scene
from models.shapes.scorer import DetectedObject, ScoreResult, detect_objects, score_image
from models.shapes.splits import (
    FAMILIES,
    HELDOUT_PAIRS,
    TRAIN_PAIRS,
    eval_prompts,
    sample_caption,
)
from models.shapes.vocab import COLOURS, PALETTE, POSITIONS, SHAPES, SIZES, Scene, SceneObject

__all__ = [
    "CATEGORIES",
    "COLOURS",
    "FAMILIES",
    "HELDOUT_PAIRS",
    "PALETTE",
    "POSITIONS",
    "RELATIONS",
    "SHAPES",
    "SIZES",
    "TRAIN_PAIRS",
    "DetectedObject",
    "EvalReport",
    "ObjectSpec",
    "ParsedCaption",
    "Scene",
    "SceneObject",
    "ScoreResult",
    "ShapesDataset",
    "compose_caption",
    "detect_objects",
    "evaluate_images",
    "eval_prompts",
    "layout",
    "parse_caption",
    "render",
    "sample_caption",
    "sample_scene",
    "score_image",
    "summarize",
    "to_tensor",
]

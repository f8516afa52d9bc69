"""Evaluation-only code: judging generated images and probing what the DiT uses.

Not part of the served packages (the service never imports it, and its dependency,
scipy, is in the ``eval`` extra). The benchmarks under ``benchmarks/`` and the tests use it.

Public API::

    score_image(image, caption) -> ScoreResult          # .ok and per category (scorer)
    evaluate_images(images, captions) -> EvalReport     # shares, overall and per category
    evaluation.probe                                     # denoising errors under contrast captions
"""

from evaluation.evaluate import CATEGORIES, EvalReport, evaluate_images, summarize
from evaluation.scorer import DetectedObject, ScoreResult, detect_objects, score_image

__all__ = [
    "CATEGORIES",
    "DetectedObject",
    "EvalReport",
    "ScoreResult",
    "detect_objects",
    "evaluate_images",
    "score_image",
    "summarize",
]

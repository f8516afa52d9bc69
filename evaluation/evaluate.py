"""Aggregate scorer verdicts over a prompt set: the GenEval-style accuracy table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from evaluation.scorer import ScoreResult, score_image

#: Categories reported per prompt set; a category counts only prompts that constrain it.
CATEGORIES: tuple[str, ...] = (
    "colour",
    "shape",
    "count",
    "size",
    "position",
    "relation",
    "exact",
)


@dataclass(frozen=True)
class EvalReport:
    """Shares of images that satisfy their captions.

    Args:
        n: number of images scored.
        overall: share with every constraint satisfied (``ScoreResult.ok``).
        per_category: share satisfying the category among images whose caption
            constrains it (``None`` when no caption does).
        support: number of images whose caption constrains each category.
    """

    n: int
    overall: float
    per_category: dict[str, float | None]
    support: dict[str, int]

    def as_dict(self) -> dict:
        return {
            "n": self.n,
            "overall": self.overall,
            "per_category": dict(self.per_category),
            "support": dict(self.support),
        }


def summarize(results: Sequence[ScoreResult]) -> EvalReport:
    """Fold per-image verdicts into an :class:`EvalReport`."""
    if not results:
        raise ValueError("need at least one result to summarize")
    per_category: dict[str, float | None] = {}
    support: dict[str, int] = {}
    for name in CATEGORIES:
        verdicts = [getattr(r, name) for r in results if getattr(r, name) is not None]
        support[name] = len(verdicts)
        per_category[name] = float(np.mean(verdicts)) if verdicts else None
    overall = float(np.mean([r.ok for r in results]))
    return EvalReport(len(results), overall, per_category, support)


def evaluate_images(
    images: torch.Tensor | Sequence[torch.Tensor | np.ndarray], captions: Sequence[str]
) -> EvalReport:
    """Score ``images[i]`` against ``captions[i]`` and summarize.

    Shape:
        images: ``(N, 3, 32, 32)`` float in ``[0, 1]`` or a sequence of images that
        :func:`~evaluation.scorer.score_image` accepts; ``len(captions) == N``.
    """
    if len(images) != len(captions):
        raise ValueError(f"got {len(images)} images for {len(captions)} captions")
    return summarize([score_image(im, c) for im, c in zip(images, captions, strict=True)])

"""How several styles combine: convex weights over their statistics, or masks that give
each pixel one style. The style-transfer model, the service and the command line all
check and normalise through these functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def convex_weights(weights: Sequence[float] | None, count: int) -> tuple[float, ...]:
    """Convex weights over ``count`` styles: ``w_i / sum_j w_j`` for given weights,
    ``1 / count`` each for ``None``.

    The sum is taken over ``w / max(w)``, whose terms lie in ``[0, 1]`` and add up to
    at most ``count``, so huge weights such as ``(1e308, 1e308)`` cannot overflow it.

    Raises:
        ValueError: not one weight per style, or a weight negative or not finite, or all 0.
    """
    if count < 1:
        raise ValueError("at least one style image is needed")
    if weights is None:
        return (1.0 / count,) * count
    values = [float(weight) for weight in weights]
    if len(values) != count:
        raise ValueError(f"got {len(values)} style weights for {count} styles")
    if any(not math.isfinite(w) or w < 0 for w in values) or max(values) <= 0:
        raise ValueError(f"style weights must be finite, >= 0 and not all 0, got {values}")
    peak = max(values)
    scaled = [w / peak for w in values]
    total = math.fsum(scaled)
    return tuple(w / total for w in scaled)


def check_masks(masks: int, styles: int, *, weighted: bool) -> None:
    """Masks choose the style of each pixel: one mask per style, and no style weights.

    Raises:
        ValueError: weights given with masks, or not one mask per style.
    """
    if weighted:
        raise ValueError("style_weights and masks cannot be combined: masks choose the style")
    if masks != styles:
        raise ValueError(f"got {masks} masks for {styles} styles; need one per style")

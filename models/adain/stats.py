"""Style statistics: per-channel means and standard deviations of VGG features, how
several styles' statistics combine, and their cache.

AdaIN only needs a style's first two moments per channel at each level, so a style
image is reduced once to :class:`FeatureStats` per level and those are cached, keyed by
a sha256 of the image's bytes (same pixels, same statistics, whatever the object). The
hash reads the image on the host: for a model on a GPU the caller computes the key from
its host copy (``key=``), so the cache never copies an image back from the device.

Several styles combine in one of two ways: their statistics are mixed by convex weights
(:func:`convex_weights`; :func:`mix` here, WCT's
:func:`~models.adain.whitening.mix_covariance`), or masks give each pixel one style's
statistics (:func:`check_masks`). The style-transfer model, the service and the command
line all check and normalise through these functions.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

import torch
from torch import Tensor

from norms.functional import channel_mean_std

#: AdaIN's epsilon: added to every variance before the square root.
EPS = 1e-5


@dataclass(frozen=True)
class FeatureStats:
    """Per-sample, per-channel ``mean`` and ``std = sqrt(var + eps)`` of a feature map.

    Shape:
        - mean, std: ``(N, C)`` with ``N`` = 1 (shared) or the content batch.
    """

    mean: Tensor
    std: Tensor

    @classmethod
    def of(cls, features: Tensor) -> FeatureStats:
        """Statistics of ``features`` ``(N, C, *spatial)`` over the spatial dims."""
        mean, std = channel_mean_std(features, EPS)
        return cls(mean.flatten(1), std.flatten(1))

    def expand(self, batch: int) -> FeatureStats:
        """Broadcast batch-1 statistics to ``batch`` rows (or check the batch matches)."""
        if self.mean.shape[0] == batch:
            return self
        if self.mean.shape[0] != 1:
            raise ValueError(f"style statistics have batch {self.mean.shape[0]}, need 1 or {batch}")
        return FeatureStats(self.mean.expand(batch, -1), self.std.expand(batch, -1))


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


def mix(stats: Sequence[FeatureStats], weights: Sequence[float], batch: int) -> FeatureStats:
    """Convex combination of several styles' statistics (AdaIN's style interpolation).

    .. math:: \\mu = \\sum_k w_k \\mu_k, \\qquad \\sigma = \\sum_k w_k \\sigma_k

    which makes ``AdaIN(c, mix)`` equal to ``sum_k w_k AdaIN(c, s_k)`` for weights
    summing to 1.
    """
    expanded = [item.expand(batch) for item in stats]
    # sums of tensors (typed ``Tensor | Literal[0]``: the start value of ``sum``)
    mean = cast(Tensor, sum(w * item.mean for w, item in zip(weights, expanded, strict=True)))
    std = cast(Tensor, sum(w * item.std for w, item in zip(weights, expanded, strict=True)))
    return FeatureStats(mean, std)


def content_key(image: Tensor) -> str:
    """sha256 of an image tensor's shape, dtype and bytes (the cache key of its statistics)."""
    data = image.detach().to("cpu").contiguous()
    digest = hashlib.sha256(f"{tuple(data.shape)}|{data.dtype}|".encode())
    digest.update(data.view(torch.uint8).numpy().data)  # a memoryview: no copy of the bytes
    return digest.hexdigest()


#: What a :class:`StyleStatsCache` holds: :class:`FeatureStats`, or WCT's
#: :class:`~models.adain.whitening.CovarianceStats`.
Stats = TypeVar("Stats")


class StyleStatsCache(Generic[Stats]):
    """Least-recently-used cache of a style's statistics (``Stats``) per (image content,
    level, mode).

    Args:
        capacity: entries kept (one entry is one style image at one level); 0 disables.
    """

    def __init__(self, capacity: int = 64) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, str, str], Stats] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def get_or_compute(
        self,
        image: Tensor,
        levels: Iterable[str],
        mode: str,
        compute: Callable[[Tensor, list[str]], dict[str, Stats]],
        *,
        key: str | None = None,
    ) -> dict[str, Stats]:
        """Statistics of ``image`` at ``levels``; only the missing levels are computed.

        Args:
            image: the style image.
            levels: feature levels wanted.
            mode: anything that changes the numbers (device, precision), part of the key.
            compute: ``compute(image, missing_levels) -> {level: FeatureStats}``.
            key: the image's content key when the caller has it (e.g. hashed from the
                host copy of an image now on a GPU, with what was done to it since);
                ``content_key(image)`` otherwise.
        """
        levels = list(levels)
        if self.capacity == 0:
            self.misses += len(levels)
            return compute(image, levels)
        key = content_key(image) if key is None else key
        found: dict[str, Stats] = {}
        for level in levels:
            entry = self._entries.get((key, level, mode))
            if entry is not None:
                self._entries.move_to_end((key, level, mode))
                found[level] = entry
        missing = [level for level in levels if level not in found]
        self.hits += len(found)
        self.misses += len(missing)
        if missing:
            for level, entry in compute(image, missing).items():
                found[level] = entry
                self._entries[(key, level, mode)] = entry
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return {level: found[level] for level in levels}

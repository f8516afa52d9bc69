"""Seeded noise: one ``torch.Generator`` per batch item, so each image has its own seed."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

Generators = torch.Generator | Sequence[torch.Generator] | None


def generators_from_seeds(seeds: Sequence[int]) -> list[torch.Generator]:
    """One CPU generator per seed (CPU draws are identical on every machine and device)."""
    return [torch.Generator().manual_seed(int(seed)) for seed in seeds]


def randn(
    shape: Sequence[int],
    generator: Generators = None,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Standard normal noise drawn on the CPU, then moved to ``device``.

    With a sequence of generators, row ``i`` is drawn from ``generator[i]`` alone, so an
    item's noise does not depend on the other items of its batch.
    """
    shape = tuple(shape)
    if generator is None or isinstance(generator, torch.Generator):
        noise = torch.randn(shape, generator=generator, dtype=dtype)
    else:
        if len(generator) != shape[0]:
            raise ValueError(f"got {len(generator)} generators for a batch of {shape[0]}")
        noise = torch.stack([torch.randn(shape[1:], generator=g, dtype=dtype) for g in generator])
    return noise.to(device)

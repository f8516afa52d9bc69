"""Seeds and seeded noise: one ``torch.Generator`` per batch item, so each image has its own seed.

Every seed of the project (API, CLI, pipeline) lies in ``[0, MAX_SEED]``, and a missing
one is drawn by :func:`random_seed`.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import torch
from torch import Tensor

Generators = torch.Generator | Sequence[torch.Generator] | None

#: The largest seed, ``2**31 - 1``: a signed 32-bit integer, which every JSON client reads
#: exactly (JavaScript numbers hold integers only up to ``2**53``).
MAX_SEED = 2**31 - 1


def random_seed() -> int:
    """A seed drawn uniformly from ``[0, MAX_SEED]`` (``secrets``: never repeats a process's
    global RNG state, so two workers started alike still draw different seeds)."""
    return secrets.randbelow(MAX_SEED + 1)


def consecutive_seeds(first: int | None, count: int) -> list[int]:
    """The seeds of ``count`` images, "image ``i`` uses ``first + i``".

    ``seed_i = (first + i) mod (MAX_SEED + 1)``: past ``MAX_SEED`` the sequence wraps to 0,
    so every seed stays in range. ``first`` is :func:`random_seed` when ``None``.

    Raises:
        ValueError: ``first`` outside ``[0, MAX_SEED]`` or ``count < 1``.
    """
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if first is None:
        first = random_seed()
    elif not 0 <= first <= MAX_SEED:
        raise ValueError(f"seed must be in [0, {MAX_SEED}], got {first}")
    return [(first + i) % (MAX_SEED + 1) for i in range(count)]


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

"""Seeds and seeded noise: one ``torch.Generator`` per batch item, so each image has its own seed.

Every seed of the project (API, CLI, pipeline) lies in ``[0, MAX_SEED]``, and a missing
one is drawn by :func:`random_seed`.

Noise is drawn where its generators live: a CUDA generator draws on the GPU (no host
draw, no copy, no sync per sampler step), a CPU generator on the CPU. Each row comes
from its own generator, so on a given device a seed gives the same noise, and so the
same image, whatever the batch it is drawn in. The CPU's and CUDA's random streams are
different algorithms (MT19937 and Philox), so a seed gives a *different* image on a
GPU than on the CPU; it is reproducible on each.
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


def generators_from_seeds(
    seeds: Sequence[int], device: torch.device | str = "cpu"
) -> list[torch.Generator]:
    """One generator per seed, on ``device`` (see the module docstring for what differs
    between devices). Generators exist for the CPU and CUDA only: any other device gets
    CPU generators, whose noise :func:`randn` copies over."""
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        device = torch.device("cpu")
    return [torch.Generator(device=device).manual_seed(int(seed)) for seed in seeds]


def randn(
    shape: Sequence[int],
    generator: Generators = None,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Standard normal noise drawn on the generators' device, then moved to ``device``
    (no copy when they are the same).

    With a sequence of generators, row ``i`` is drawn from ``generator[i]`` alone, so an
    item's noise does not depend on the other items of its batch. Without a generator
    the noise is drawn on ``device`` from torch's default generator there.
    """
    shape = tuple(shape)
    if generator is None:
        return torch.randn(shape, device=device, dtype=dtype)
    if isinstance(generator, torch.Generator):
        noise = torch.randn(shape, generator=generator, device=generator.device, dtype=dtype)
    else:
        if len(generator) != shape[0]:
            raise ValueError(f"got {len(generator)} generators for a batch of {shape[0]}")
        noise = torch.stack(
            [torch.randn(shape[1:], generator=g, device=g.device, dtype=dtype) for g in generator]
        )
    return noise.to(device)

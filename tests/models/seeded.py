"""Seeded inputs for the models' tests: the same tensor on every run."""

from __future__ import annotations

import torch


def seeded_rand(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Uniform values in ``[0, 1)`` of ``shape`` from a CPU generator seeded with ``seed``."""
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)

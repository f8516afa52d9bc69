"""Shared settings for the norms tests: a small, deadline-free hypothesis profile."""

import pytest
import torch
from hypothesis import settings

settings.register_profile("norms", max_examples=25, deadline=None, derandomize=True)
settings.load_profile("norms")


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded generator so every test draws the same inputs on every run."""
    return torch.Generator().manual_seed(0)

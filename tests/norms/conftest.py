"""Shared fixtures and the hypothesis settings of the norms tests.

The ``norms`` profile (25 derandomised examples, no deadline: the suite runs on shared
2-core machines) is active only while pytest imports a module of this folder, which is
when ``@given`` fixes a test's settings; the previously active profile is restored
afterwards, so the tests of other folders keep theirs.
"""

import pytest
import torch
from hypothesis import settings

settings.register_profile("norms", max_examples=25, deadline=None, derandomize=True)
_outer_profile: list[str] = []


def pytest_collectstart(collector):
    if isinstance(collector, pytest.Module):
        _outer_profile.append(settings.get_current_profile_name())
        settings.load_profile("norms")


def pytest_collectreport(report):
    if _outer_profile:
        settings.load_profile(_outer_profile.pop())


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded generator so every test draws the same inputs on every run."""
    return torch.Generator().manual_seed(0)

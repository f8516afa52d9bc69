"""Fixtures of the things tests: the emoji font, or a skip that says how to install it."""

from __future__ import annotations

import pytest

from models.things.render import FontMissingError, font_path


@pytest.fixture(scope="session")
def emoji_font():
    """The font's path; tests that draw emoji skip with the install hint without it."""
    try:
        return font_path()
    except FontMissingError as error:
        pytest.skip(str(error))

"""The emoji font: found by setting, a clear error without it, every thing drawable."""

import pytest

from models.things.render import (
    FONT_ENV,
    SPRITE_SIZE,
    STRIKE_SIZE,
    FontMissingError,
    emoji_glyph,
    emoji_sprite,
    font_path,
)
from models.things.vocab import things


def test_a_missing_font_raises_a_clear_error(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere" / "NotoColorEmoji.ttf"
    monkeypatch.setenv(FONT_ENV, str(missing))
    with pytest.raises(FontMissingError) as info:
        font_path()
    message = str(info.value)
    assert str(missing) in message
    assert "fonts-noto-color-emoji" in message and "make fonts" in message
    with pytest.raises(FontMissingError):
        emoji_glyph("\U0001f680")


def test_the_setting_names_the_font(emoji_font, monkeypatch):
    monkeypatch.setenv(FONT_ENV, str(emoji_font))
    assert font_path() == emoji_font


def test_every_thing_draws_as_one_picture(emoji_font):
    for t in things():
        if t.emoji is None:
            continue
        # one glyph at most one em wide (a sequence the font lacks draws its parts side by
        # side) and not a sliver
        w, h = emoji_glyph(t.emoji).size
        assert w <= 1.25 * STRIKE_SIZE and max(w, h) >= STRIKE_SIZE // 4, t.name
        sprite = emoji_sprite(t.emoji)
        assert max(sprite.size) == SPRITE_SIZE, t.name

"""The GPU training kit: the cut-down MiniLM encodes training captions as the full one
does, and the cut-down font draws the same glyphs."""

from __future__ import annotations

import pytest
import torch
from deploy_files import deploy_script

pytest.importorskip("fontTools")


@pytest.fixture(scope="module")
def kit():
    return deploy_script("device.kit")


def test_the_cut_minilm_encodes_training_captions_like_the_full_one(kit, tmp_path):
    from models.text_encoder import MiniLMEncoder
    from models.things import ThingsDataset

    rows = kit.pack_minilm(tmp_path / "packed", seed=0, sampled=300)
    assert 500 < rows < 30522
    packed = sum(f.stat().st_size for f in (tmp_path / "packed").rglob("*") if f.is_file())
    assert packed < 32 * 2**20  # fits the device call beside the code and the font
    folder = kit.unpack_minilm(tmp_path / "packed", tmp_path / "minilm")
    stream = ThingsDataset("train", seed=0, length=10_000)
    captions = [stream.scene(i).caption for i in range(5_000, 5_032)]  # not the sampled ones
    full, cut = MiniLMEncoder(), MiniLMEncoder(folder=folder)
    expected, got = full.encode(captions), cut.encode(captions)
    assert torch.equal(expected.mask, got.mask)
    # float16 weights: the features move by about 1e-3; a zeroed word piece would move
    # its token's state by far more
    torch.testing.assert_close(got.pooled, expected.pooled, atol=2e-2, rtol=0)
    torch.testing.assert_close(got.tokens, expected.tokens, atol=5e-2, rtol=0)


def test_the_cut_font_draws_the_vocabularys_glyphs_as_the_full_font(kit, tmp_path, monkeypatch):
    import numpy as np

    from models.things import font_path, things
    from models.things.render import emoji_glyph

    try:
        font_path()
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    sample = [item.emoji for item in things() if item.emoji][::97]
    full = [np.asarray(emoji_glyph(text)) for text in sample]
    full_size = font_path().stat().st_size
    kit.subset_font(tmp_path / "cut.ttf")
    monkeypatch.setenv("ATELIER_EMOJI_FONT", str(tmp_path / "cut.ttf"))
    cut = [np.asarray(emoji_glyph(text)) for text in sample]
    assert (tmp_path / "cut.ttf").stat().st_size < full_size / 2
    for a, b in zip(full, cut, strict=True):
        assert np.array_equal(a, b)

"""The served style transfer runs on ``norms``: every pass of the default preset (and of
a print-size stylisation) takes its whitening and colouring from ``norms.functional``."""

from __future__ import annotations

import pytest
import torch

import norms.functional as NF  # noqa: N812
from models.adain.large import PrintStylization
from models.adain.pipeline import StyleTransfer
from models.adain.presets import get_preset

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture
def calls(monkeypatch):
    """Counts of the norms functions the style-transfer models call, by name."""
    counted: dict[str, int] = {}
    for name in ("feature_covariance", "symmetric_power", "whitening_coloring_affine"):
        original = getattr(NF, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            counted[_name] = counted.get(_name, 0) + 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(NF, name, spy)
    return counted


@pytest.mark.parametrize("preset", ["quality", "realtime"])
def test_every_pass_of_a_served_preset_calls_norms(tiny_networks, calls, preset):
    encoder, decoders = tiny_networks
    model = StyleTransfer(encoder, decoders, fast=True)  # as the service loads it
    gen = torch.Generator().manual_seed(0)
    model.stylize(
        torch.rand(1, 3, 96, 80, generator=gen),
        [torch.rand(1, 3, 64, 64, generator=gen)],
        preset=preset,
    )
    passes = get_preset(preset).passes
    assert calls["whitening_coloring_affine"] == passes  # one transform per pass
    assert calls["feature_covariance"] >= 2 * passes  # the content's and the style's
    assert calls["symmetric_power"] >= passes


def test_a_print_size_stylisation_calls_norms_for_its_octaves(tiny_networks, calls):
    encoder, decoders = tiny_networks
    model = StyleTransfer(encoder, decoders, fast=True)
    content = (torch.rand(3, 120, 180, generator=torch.Generator().manual_seed(1)) * 255).byte()
    session = PrintStylization(content, [torch.rand(1, 3, 40, 40)], base_side=64, tile_side=50)
    session.run(model)
    octaves = len([phase for phase in session.phases() if phase[0].kind == "statistics"])
    base = get_preset("quality").passes
    assert calls["whitening_coloring_affine"] == base + octaves

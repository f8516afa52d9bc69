"""The ComfyUI node pack (``integrations/comfyui``) without ComfyUI: loaded as ComfyUI
loads a custom node folder (its ``__init__.py`` as a package), its contract checked,
and each node run with IMAGE tensors ``(B, H, W, C)`` in [0, 1] against a real server
around the fake models (``tests/service/service_fakes.py``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
from service_fakes import FakeTextToImage

pytestmark = pytest.mark.timeout(120)
PACK = Path(__file__).resolve().parents[2] / "integrations" / "comfyui"


@pytest.fixture(scope="module")
def pack() -> ModuleType:
    """The folder imported the way ComfyUI imports ``custom_nodes/<folder>``."""
    spec = importlib.util.spec_from_file_location(
        "atelier_nodes", PACK / "__init__.py", submodule_search_locations=[str(PACK)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["atelier_nodes"] = module
    spec.loader.exec_module(module)
    return module


def _settings(pack: ModuleType, url: str) -> object:
    (settings,) = pack.NODE_CLASS_MAPPINGS["AtelierSettings"]().settings(url, "")
    return settings


def _solid(colour: tuple[int, int, int], height: int = 32, width: int = 48) -> torch.Tensor:
    return torch.tensor(colour, dtype=torch.float32).div(255).expand(1, height, width, 3).clone()


def test_the_pack_declares_comfyuis_node_contract(pack):
    mappings, names = pack.NODE_CLASS_MAPPINGS, pack.NODE_DISPLAY_NAME_MAPPINGS
    assert set(names.values()) == {
        "Atelier Settings",
        "Atelier Stylize",
        "Atelier Stylize Frames",
        "Atelier Generate",
    }
    assert set(mappings) == set(names)
    for node in mappings.values():
        inputs = node.INPUT_TYPES()
        assert set(inputs) <= {"required", "optional"} and inputs["required"]
        assert callable(getattr(node(), node.FUNCTION))
        assert isinstance(node.RETURN_TYPES, tuple) and node.CATEGORY == "Atelier"
        for spec in [*inputs["required"].values(), *inputs.get("optional", {}).values()]:
            kind = spec[0]
            assert isinstance(kind, list) or kind.isupper(), spec  # a type name or choices
    stylize = mappings["AtelierStylize"].INPUT_TYPES()
    assert {"image", "painting", "alpha", "preserve_color", "preset", "size"} <= set(
        stylize["required"]
    )
    assert {"painting_4", "mask_1", "mask_4", "atelier"} <= set(stylize["optional"])
    assert stylize["required"]["size"][1]["max"] == 8192
    assert mappings["AtelierStylize"].RETURN_TYPES == ("IMAGE",)


def test_stylize_takes_and_gives_image_tensors(pack, fake_server):
    node = pack.NODE_CLASS_MAPPINGS["AtelierStylize"]()
    photos = torch.cat([_solid((200, 40, 40)), _solid((40, 200, 40))])  # a batch of two
    paintings = {"painting": _solid((20, 20, 220)), "painting_2": _solid((220, 220, 20))}
    (out,) = node.stylize(
        image=photos,
        alpha=0.5,
        preserve_color=False,
        preset="realtime",
        style_scale=1.0,
        weights="3,1",
        size=48,
        atelier=_settings(pack, fake_server.url),
        **paintings,
    )
    assert out.shape == (2, 32, 48, 3) and out.dtype == torch.float32
    assert out.min() >= 0.0 and out.max() <= 1.0
    mean = 0.75 * np.array([20, 20, 220]) + 0.25 * np.array([220, 220, 20])
    for photo, picture in zip(([200, 40, 40], [40, 200, 40]), out, strict=True):
        expected = (0.5 * np.array(photo) + 0.5 * mean) / 255
        np.testing.assert_allclose(picture[10, 10].numpy(), expected, atol=2 / 255)


def test_stylize_frames_sends_a_four_frame_batch_as_one_clip(pack, fake_server):
    node = pack.NODE_CLASS_MAPPINGS["AtelierStylizeFrames"]()
    frames = torch.linspace(0.2, 0.8, 4)[:, None, None, None].expand(4, 33, 47, 3).clone()
    before = fake_server.fakes.adain["cpu"].frames_seen
    (out,) = node.stylize_frames(
        frames=frames,
        painting=_solid((255, 255, 255)),
        alpha=0.0,
        preserve_color=False,
        preset="quality",
        style_scale=1.0,
        fps=8,
        atelier=_settings(pack, fake_server.url),
    )
    assert fake_server.fakes.adain["cpu"].frames_seen - before == 4  # the video path
    assert out.shape == (4, 33, 47, 3)
    # alpha 0: the fake's frame is the negative, blended with the one before along the
    # motion; the frames keep their order and grow darker as the input grows lighter
    levels = out.mean(dim=(1, 2, 3))
    assert torch.all(levels[1:] < levels[:-1]), levels
    assert abs(levels[0].item() - 0.8) < 0.1


def test_generate_draws_a_batch_of_seeds(pack, fake_server):
    node = pack.NODE_CLASS_MAPPINGS["AtelierGenerate"]()
    (out,) = node.generate(
        prompt="a red circle",
        seed=9,
        steps=2,
        guidance=3.0,
        num_images=2,
        atelier=_settings(pack, fake_server.url),
    )
    assert out.shape == (2, 8, 8, 3)
    for k in range(2):
        expected = FakeTextToImage.pixels(9 + k).astype(np.float32) / 255
        np.testing.assert_allclose(out[k].numpy(), expected, atol=1e-6)


def test_the_progress_hook_is_comfyuis_when_present(pack, monkeypatch):
    assert pack.nodes.comfy_progress() is None  # no ComfyUI here: nothing reported
    updates: list[tuple[int, int]] = []

    class ProgressBar:
        def __init__(self, total: int) -> None:
            self.total = total

        def update_absolute(self, value: int, total: int | None = None) -> None:
            updates.append((value, self.total))

    comfy, utils = ModuleType("comfy"), ModuleType("comfy.utils")
    utils.ProgressBar = ProgressBar  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "comfy", comfy)
    monkeypatch.setitem(sys.modules, "comfy.utils", utils)
    report = pack.nodes.comfy_progress()
    from atelier_client import Progress

    for step in range(4):
        report(Progress("frame", step, 3, step / 3))
    assert updates == [(0, 3), (1, 3), (2, 3), (3, 3)]

"""Fixtures shared by the models tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from models.decoder import Decoder
from models.vgg import VGGEncoder

SHARED_FILES = (
    "vgg19-normalised/vgg_normalised_conv3_1.pth",
    "vgg19-normalised/feature_invertor_conv1_1.pth",
    "vgg19-normalised/feature_invertor_conv2_1.pth",
    "vgg19-normalised/feature_invertor_conv3_1.pth",
)


@pytest.fixture(scope="module")
def single_thread():
    """One intra-op thread for a module of tiny-tensor tests: faster, and immune to a busy
    machine. Use with ``pytestmark = pytest.mark.usefixtures("single_thread")``."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def shared_weights_dir() -> Path:
    """``$ATELIER_WEIGHTS_DIR`` when it holds the shared VGG files; skips the test otherwise."""
    folder = os.environ.get("ATELIER_WEIGHTS_DIR")
    if not folder:
        pytest.skip("ATELIER_WEIGHTS_DIR is not set")
    missing = [name for name in SHARED_FILES if not (Path(folder) / name).is_file()]
    if missing:
        pytest.skip(f"shared weights missing in {folder}: {missing}")
    return Path(folder)


@pytest.fixture(scope="session")
def shared_images_dir(shared_weights_dir: Path) -> Path:
    """The shared photos and paintings, beside the shared weights; skips when absent."""
    folder = shared_weights_dir.parent / "images"
    if not (folder / "content").is_dir() or not (folder / "style").is_dir():
        pytest.skip(f"shared images not found at {folder}")
    return folder


@pytest.fixture
def random_published_state():
    """``make(module, seed)``: a seeded random state_dict of ``module``'s layout, keyed
    like the published files (``"<index>.weight"``, without the ``layers.`` prefix)."""

    def make(module: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        return {
            key.removeprefix("layers."): torch.randn(value.shape, generator=generator) * 0.1
            for key, value in module.state_dict().items()
        }

    return make


@pytest.fixture
def tiny_networks() -> tuple[VGGEncoder, dict[str, Decoder]]:
    """A seeded random encoder (to relu3_1) and decoders for every level, in float32."""
    torch.manual_seed(0)
    encoder = VGGEncoder("relu3_1")
    decoders = {level: Decoder(level) for level in ("relu1_1", "relu2_1", "relu3_1")}
    return encoder, decoders


@pytest.fixture(scope="session")
def tiny_dit_checkpoint(tmp_path_factory) -> Path:
    """A tiny DiT with non-trivial weights, recorded as trained with the hashed-word encoder."""
    from models.dit.checkpoint import save_dit
    from models.dit.config import get_preset
    from models.dit.model import DiT
    from models.dit.pipeline import DEFAULT_CHECKPOINT

    torch.manual_seed(0)
    model = DiT(get_preset("tiny"))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    path = tmp_path_factory.mktemp("dit") / DEFAULT_CHECKPOINT
    return save_dit(path, model, step=7, text_encoder="HashedWordEncoder")

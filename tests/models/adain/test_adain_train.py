"""Decoder training: the paper's losses, the loss falls, checkpoints resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from models.adain.pipeline import ENCODER_FILE
from models.adain.train import TrainConfig, adain_losses, train
from models.checkpoints import load_state_dict
from models.decoder import Decoder
from models.vgg import VGGEncoder
from service.cli import main


def _write_images(folder, count, seed, kind):
    """Generated pictures: smooth colour gradients ("photos") or stripes ("paintings")."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:40, 0:48] / 40.0
    for index in range(count):
        if kind == "content":
            channels = [np.clip(rng.random() * x + rng.random() * y, 0, 1) for _ in range(3)]
        else:
            frequency = rng.integers(2, 8)
            channels = [
                0.5 + 0.5 * np.sin(frequency * np.pi * (x + y) + rng.random() * 6) for _ in range(3)
            ]
        array = (np.stack(channels, -1) * 255).astype(np.uint8)
        Image.fromarray(array).save(folder / f"{index}.png")
    return folder


@pytest.fixture
def data(tmp_path):
    content = _write_images(tmp_path / "content", 3, 0, "content")
    styles = _write_images(tmp_path / "styles", 3, 1, "style")
    return content, styles


@pytest.fixture
def encoder():
    torch.manual_seed(0)
    return VGGEncoder("relu2_1")


def _config(tmp_path, data, **overrides):
    content, styles = data
    settings = dict(
        content_dir=content,
        style_dir=styles,
        out_dir=tmp_path / "run",
        level="relu2_1",
        steps=20,
        batch_size=2,
        size=16,
        lr=1e-3,
        checkpoint_every=10,
        style_weight=1.0,
    )
    settings.update(overrides)
    return TrainConfig(**settings)


def test_losses_follow_the_paper_definition(encoder):
    """Content loss is the MSE to the AdaIN target: zero when the decoder output's
    features equal it, which we check against a direct computation."""
    torch.manual_seed(1)
    decoder = Decoder("relu2_1")
    content, style = torch.rand(2, 3, 16, 16), torch.rand(2, 3, 16, 16)
    content_loss, style_loss = adain_losses(encoder, decoder, content, style)
    with torch.no_grad():
        from norms.functional import adain

        target = adain(encoder.encode(content, "relu2_1"), encoder.encode(style, "relu2_1"))
        output = decoder(target)
        expected = torch.nn.functional.mse_loss(encoder.encode(output, "relu2_1"), target)
    torch.testing.assert_close(content_loss.detach(), expected)
    assert style_loss.requires_grad and float(style_loss.detach()) > 0


def test_loss_falls(tmp_path, data, encoder):
    history = train(_config(tmp_path, data), encoder, progress=False)
    assert len(history) == 20
    assert np.mean(history[-5:]) < 0.7 * np.mean(history[:5])


def test_checkpoint_and_resume(tmp_path, data, encoder):
    config = _config(tmp_path, data, steps=10, checkpoint_every=5)
    train(config, encoder, progress=False)
    saved = load_state_dict(config.decoder_path)
    resumed = train(_config(tmp_path, data, steps=14, resume=True), encoder, progress=False)
    assert len(resumed) == 4  # continues from step 10
    after = load_state_dict(config.decoder_path)
    assert any(not torch.equal(saved[k], after[k]) for k in saved)
    # starting from a decoder file: same weights as the saved checkpoint before any step
    start = _config(
        tmp_path, data, steps=1, init_decoder=config.decoder_path, lr=1e-12, out_dir=tmp_path / "b"
    )
    train(start, encoder, progress=False)
    loaded = load_state_dict(start.decoder_path)
    assert all(torch.allclose(loaded[k], after[k], atol=1e-6) for k in after)


def test_bad_config_and_missing_state(tmp_path, data):
    with pytest.raises(ValueError, match="steps"):
        _config(tmp_path, data, steps=0)
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train(_config(tmp_path, data, resume=True), VGGEncoder("relu2_1"), progress=False)
    with pytest.raises(ValueError, match="shallower"):
        train(_config(tmp_path, data, level="relu3_1"), VGGEncoder("relu2_1"), progress=False)


def test_cli_trains_and_writes_a_safetensors_decoder(tmp_path, data, monkeypatch, capsys):
    weights = tmp_path / "weights"
    (weights / "vgg19-normalised").mkdir(parents=True)
    torch.manual_seed(0)
    state = {k.removeprefix("layers."): v for k, v in VGGEncoder("relu3_1").state_dict().items()}
    torch.save(state, weights / ENCODER_FILE)
    monkeypatch.setenv("ATELIER_WEIGHTS_DIR", str(weights))
    content, styles = data
    out = tmp_path / "cli"
    code = main(
        [
            "train-adain",
            "--content",
            str(content),
            "--styles",
            str(styles),
            "--out",
            str(out),
            "--level",
            "relu1_1",
            "--steps",
            "3",
            "--batch",
            "1",
            "--size",
            "16",
            "--device",
            "cpu",
        ]
    )
    assert code == 0
    assert (out / "decoder_relu1_1.safetensors").is_file()
    assert "loss" in capsys.readouterr().out

"""``atelier stylize`` end to end on generated images with seeded random weights."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from models.adain import StyleTransfer
from models.adain.pipeline import DECODER_FILES, ENCODER_FILE
from models.decoder import Decoder
from models.vgg import VGGEncoder
from service.cli import main


def _published(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {key.removeprefix("layers."): value for key, value in module.state_dict().items()}


@pytest.fixture
def weights_dir(tmp_path, monkeypatch):
    """Random weights in the published layout and file names, as ATELIER_WEIGHTS_DIR."""
    torch.manual_seed(0)
    folder = tmp_path / "weights"
    (folder / "vgg19-normalised").mkdir(parents=True)
    torch.save(_published(VGGEncoder("relu3_1")), folder / ENCODER_FILE)
    for level, name in DECODER_FILES.items():
        torch.save(_published(Decoder(level)), folder / name)
    monkeypatch.setenv("ATELIER_WEIGHTS_DIR", str(folder))
    monkeypatch.setenv("ATELIER_DEVICES", "cpu")
    return folder


def _image(path, size, seed, mode="RGB"):
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(path)
    return path


def test_stylize_writes_an_image_of_the_content_size(weights_dir, tmp_path):
    content = _image(tmp_path / "c.png", (45, 30), 1)
    style = _image(tmp_path / "s.png", (20, 20), 2)
    out = tmp_path / "out" / "o.png"
    assert main(["stylize", str(content), str(style), "-o", str(out), "--size", "40"]) == 0
    with Image.open(out) as result:
        assert result.size == (40, 27)  # 45x30 scaled to a 40 px long side
        assert result.mode == "RGB"


def test_options_reach_the_model(weights_dir, tmp_path, monkeypatch):
    content = _image(tmp_path / "c.png", (24, 24), 1)
    styles = [_image(tmp_path / f"s{i}.png", (16, 16), 10 + i) for i in range(2)]
    left = np.zeros((24, 24), np.uint8)
    left[:, :12] = 255
    Image.fromarray(left, "L").save(tmp_path / "m0.png")
    Image.fromarray(255 - left, "L").save(tmp_path / "m1.png")
    calls = []
    original = StyleTransfer.stylize

    def spy(self, content, styles, **kwargs):
        calls.append((content.shape, [s.shape for s in styles], kwargs))
        return original(self, content, styles, **kwargs)

    monkeypatch.setattr(StyleTransfer, "stylize", spy)
    common = ["stylize", str(content), *map(str, styles), "-o", str(tmp_path / "o.png")]
    assert main([*common, "--style-weights", "2,1", "--alpha", "0.5"]) == 0
    assert (
        main([*common, "--mask", str(tmp_path / "m0.png"), "--mask", str(tmp_path / "m1.png")]) == 0
    )
    assert main([*common, "--preserve-color", "--levels", "relu2_1,relu1_1"]) == 0
    assert main([*common, "--preset", "realtime", "--style-scale", "1.5"]) == 0

    (shape, style_shapes, weighted), (_, _, masked), (_, _, colour), (_, _, fast) = calls
    assert weighted["preset"] == "quality" and fast["preset"] == "realtime"
    assert weighted["style_scale"] == 1.0 and fast["style_scale"] == 1.5
    assert shape == (1, 3, 24, 24) and style_shapes == [(1, 3, 16, 16)] * 2
    assert list(weighted["style_weights"]) == [2.0, 1.0] and weighted["alpha"] == 0.5
    masks = masked["masks"]
    assert [m.shape for m in masks] == [(1, 1, 24, 24)] * 2
    assert float(masks[0][..., :, :10].min()) == 1.0 and float(masks[0][..., :, 14:].max()) == 0.0
    torch.testing.assert_close(masks[0] + masks[1], torch.ones(1, 1, 24, 24))
    assert colour["preserve_color"] is True and colour["levels"] == ["relu2_1", "relu1_1"]
    assert weighted["preserve_color"] is False and weighted["masks"] is None


def common_of(content, style, out) -> list[str]:
    return ["stylize", str(content), str(style), "-o", str(out)]


def test_bad_arguments_exit_2_with_a_message(weights_dir, tmp_path, capsys):
    content = _image(tmp_path / "c.png", (16, 16), 1)
    style = _image(tmp_path / "s.png", (16, 16), 2)
    out = tmp_path / "o.png"
    assert (
        main(["stylize", str(content), str(style), "-o", str(out), "--style-weights", "1,2"]) == 2
    )
    assert "style weights" in capsys.readouterr().err
    assert main(["stylize", str(content), str(style), "-o", str(out), "--alpha", "1.5"]) == 2
    assert "alpha" in capsys.readouterr().err
    assert main(["stylize", str(content), str(style), "-o", str(out), "--levels", "relu4_1"]) == 2
    for bad in ("3", "0.1", "nan"):
        assert main([*common_of(content, style, out), "--style-scale", bad]) == 2
        assert "style_scale must be in [0.25, 2.0]" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: not one of the choices
        main(["stylize", str(content), str(style), "-o", str(out), "--preset", "turbo"])
    assert "invalid choice" in capsys.readouterr().err
    assert not out.exists()


def test_missing_weights_say_how_to_fetch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATELIER_WEIGHTS_DIR", str(tmp_path / "empty"))
    content = _image(tmp_path / "c.png", (16, 16), 1)
    assert main(["stylize", str(content), str(content), "-o", str(tmp_path / "o.png")]) == 1
    err = capsys.readouterr().err
    assert "atelier weights fetch" in err and str(tmp_path / "empty") in err


def test_the_output_records_what_the_service_records(weights_dir, tmp_path):
    """The CLI's PNG carries the service's parameter chunks for the same request."""
    from fastapi.testclient import TestClient
    from service_fakes import make_settings

    from models.adain.presets import get_preset
    from service.app import create_app

    content = _image(tmp_path / "c.png", (40, 30), 1)
    styles = [_image(tmp_path / f"s{i}.png", (20, 20), 2 + i) for i in range(2)]
    out = tmp_path / "o.png"
    args = ["stylize", str(content), *map(str, styles), "-o", str(out), "--size", "32"]
    assert main([*args, "--style-weights", "3,1", "--alpha", "0.5", "--preset", "realtime"]) == 0
    with Image.open(out) as image:
        cli = dict(image.text)
    settings = make_settings(weights_dir=weights_dir, load_models="adain")
    with TestClient(create_app(settings)) as client:
        files = [("content", content.read_bytes())]
        files += [("style", style.read_bytes()) for style in styles]
        data = {"size": "32", "style_weights": "3,1", "alpha": "0.5", "preset": "realtime"}
        response = client.post("/v1/stylize", files=files, data=data)
    assert response.status_code == 200, response.text
    with Image.open(io.BytesIO(response.content)) as image:
        served = dict(image.text)
    # the same chunks and values: both run the fast path (bf16 where the CPU has native
    # kernels), from the same inputs
    assert cli == served
    assert json.loads(cli["style_weights"]) == [0.75, 0.25]
    assert json.loads(cli["levels"]) == list(get_preset("realtime").levels)
    assert set(json.loads(cli["checkpoint_sha256"])) == {
        Path(name).name for name in (ENCODER_FILE, *DECODER_FILES.values())
    }


def test_an_unknown_output_suffix_is_refused_before_any_work(weights_dir, tmp_path, capsys):
    content = _image(tmp_path / "c.png", (16, 16), 1)
    assert main(["stylize", str(content), str(content), "-o", str(tmp_path / "o.tiff")]) == 2
    assert "write one of" in capsys.readouterr().err


def test_a_video_is_written_in_its_container_with_its_frames_and_audio(
    weights_dir, tmp_path, capsys
):
    from models.video import probe
    from tests.clips import CLIPS, audio_payloads, container_metadata, make_clip

    clip = make_clip(*CLIPS["mp4"], frames=11)
    source = tmp_path / "clip.mp4"
    source.write_bytes(clip)
    style = _image(tmp_path / "s.png", (20, 20), 2)
    out = tmp_path / "painted.mp4"
    assert main(["stylize", str(source), str(style), "-o", str(out), "--preset", "realtime"]) == 0
    before, after = probe(clip), probe(out.read_bytes())
    assert (after.frames, after.fps, after.width, after.height) == (
        before.frames,
        before.fps,
        before.width,
        before.height,
    )
    assert audio_payloads(out.read_bytes()) == audio_payloads(clip)
    recorded = json.loads(container_metadata(out.read_bytes())["comment"])
    assert recorded["frames"] == 11 and recorded["preset"] == "realtime"


def test_a_video_to_another_container_or_with_masks_is_refused(weights_dir, tmp_path, capsys):
    from tests.clips import CLIPS, make_clip

    source = tmp_path / "clip.webm"
    source.write_bytes(make_clip(*CLIPS["webm"], frames=4))
    style = _image(tmp_path / "s.png", (20, 20), 2)
    assert main(["stylize", str(source), str(style), "-o", str(tmp_path / "o.mp4")]) == 2
    assert "*.webm" in capsys.readouterr().err
    masked = ["--mask", str(style)]
    assert main(["stylize", str(source), str(style), "-o", str(tmp_path / "o.webm"), *masked]) == 2
    assert "--mask" in capsys.readouterr().err


def _photo_with_exif_and_profile(path: Path, size: tuple[int, int]) -> Path:
    """A JPEG shown rotated (EXIF orientation 6) and tagged with a colour profile."""
    from icc import SWAPPED_PROFILE

    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(pixels).save(path, exif=exif, icc_profile=SWAPPED_PROFILE, quality=90)
    return path


def test_the_cli_and_the_api_give_the_model_the_same_tensors(weights_dir, tmp_path, monkeypatch):
    """One request (a rotated, profiled JPEG shrunk to --size; a transparent PNG and a
    16-bit greyscale style; two masks of another size), sent by ``atelier stylize`` and to
    ``POST /v1/stylize``: the model is given the very same tensors, and runs on the same
    (fast) path."""
    from fastapi.testclient import TestClient
    from service_fakes import make_settings

    from service.app import create_app

    content = _photo_with_exif_and_profile(tmp_path / "c.jpg", (150, 110))
    rgba = np.random.default_rng(6).integers(0, 256, (70, 90, 4), dtype=np.uint8)
    Image.fromarray(rgba, "RGBA").save(tmp_path / "s0.png")
    deep = np.random.default_rng(7).integers(0, 65536, (80, 60), dtype=np.uint16)
    Image.fromarray(deep).save(tmp_path / "s1.png")  # mode I;16
    styles = [tmp_path / "s0.png", tmp_path / "s1.png"]
    left = np.zeros((50, 70), np.uint8)
    left[:, :33] = 255
    Image.fromarray(left, "L").save(tmp_path / "m0.png")
    Image.fromarray(255 - left, "L").save(tmp_path / "m1.png")
    masks = [tmp_path / "m0.png", tmp_path / "m1.png"]

    calls = []
    original = StyleTransfer.stylize

    def spy(self, content, styles, **kwargs):
        masks = kwargs.get("masks")
        calls.append(
            (
                self.fast,
                content.clone(),
                [style.clone() for style in styles],
                None if masks is None else [mask.clone() for mask in masks],
            )
        )
        return original(self, content, styles, **kwargs)

    monkeypatch.setattr(StyleTransfer, "stylize", spy)
    args = ["stylize", str(content), *map(str, styles), "-o", str(tmp_path / "o.png")]
    assert main([*args, "--size", "48", *(f"--mask={mask}" for mask in masks)]) == 0
    settings = make_settings(weights_dir=weights_dir, load_models="adain")
    with TestClient(create_app(settings)) as client:
        files = [("content", content.read_bytes())]
        files += [("style", style.read_bytes()) for style in styles]
        files += [("mask", mask.read_bytes()) for mask in masks]
        response = client.post("/v1/stylize", files=files, data={"size": "48"})
    assert response.status_code == 200, response.text

    (cli_fast, *cli), (api_fast, *api) = calls[0], calls[-1]  # (the server warms up between)
    assert cli_fast and api_fast
    cli_content, cli_styles, cli_masks = cli
    api_content, api_styles, api_masks = api
    assert cli_content.shape == (1, 3, 48, 35)  # shown upright: 110 x 150, shrunk to 48
    assert cli_content.dtype == api_content.dtype == torch.float32
    assert torch.equal(cli_content, api_content)
    assert len(cli_styles) == len(api_styles) == 2
    for mine, theirs in zip(cli_styles, api_styles, strict=True):
        assert mine.shape == theirs.shape and torch.equal(mine, theirs)
    assert cli_masks is not None and api_masks is not None
    assert [m.shape for m in cli_masks] == [(1, 1, 48, 35)] * 2
    for mine, theirs in zip(cli_masks, api_masks, strict=True):
        assert torch.equal(mine, theirs)


def test_a_file_that_is_no_image_exits_2_naming_it(weights_dir, tmp_path, capsys):
    """The files are read as the service reads uploads: its refusals, named by path."""
    style = _image(tmp_path / "s.png", (20, 20), 2)
    notes = tmp_path / "notes.txt"
    notes.write_text("not a picture")
    assert main(["stylize", str(notes), str(style), "-o", str(tmp_path / "o.png")]) == 2
    err = capsys.readouterr().err
    assert str(notes) in err and "not an image in a supported format" in err
    tiny = _image(tmp_path / "tiny.png", (8, 8), 3)
    assert main(["stylize", str(tiny), str(style), "-o", str(tmp_path / "o.png")]) == 2
    assert "smaller than 16 px" in capsys.readouterr().err

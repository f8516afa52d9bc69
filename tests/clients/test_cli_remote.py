"""``atelier stylize|generate --server URL`` (or ``ATELIER_SERVER``): the commands run on
a real server (uvicorn around the fake models) through the client, and write what the
server made."""

from __future__ import annotations

import numpy as np
import pytest
from client_helpers import pixels_of, solid_png
from service_fakes import FakeTextToImage

from service.cli import main

pytestmark = pytest.mark.timeout(60)


def test_stylize_with_server_writes_the_servers_picture(fake_server, tmp_path):
    (tmp_path / "photo.png").write_bytes(solid_png((200, 40, 40)))
    (tmp_path / "style.png").write_bytes(solid_png((20, 20, 220)))
    out = tmp_path / "out" / "painted.jpg"
    args = ["stylize", str(tmp_path / "photo.png"), str(tmp_path / "style.png"), "-o", str(out)]
    assert main([*args, "--alpha", "0.5", "--quality", "100", "--server", fake_server.url]) == 0
    assert out.read_bytes()[:3] == b"\xff\xd8\xff"  # the suffix asked for a JPEG
    assert np.abs(pixels_of(out.read_bytes())[16, 24] - [110, 30, 130]).max() <= 3


def test_generate_reads_atelier_server_and_writes_each_seed(
    fake_server, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("ATELIER_SERVER", fake_server.url)
    args = ["generate", "a red circle and a cat", "-n", "2", "--seed", "3", "--steps", "2"]
    assert main([*args, "-o", str(tmp_path)]) == 0
    for seed in (3, 4):
        pixels = pixels_of((tmp_path / f"seed{seed}.png").read_bytes())
        np.testing.assert_array_equal(pixels, FakeTextToImage.pixels(seed))
    said = capsys.readouterr().err.splitlines()
    assert said[-2:] == [
        "understood: a red circle and a cat",
        "not learned by this model: cat (drawn as typed; the images will not show them)",
    ]


def test_the_servers_errors_and_local_flags_are_refused_plainly(fake_server, tmp_path, capsys):
    (tmp_path / "photo.png").write_bytes(solid_png((1, 2, 3)))
    args = ["stylize", str(tmp_path / "photo.png"), str(tmp_path / "photo.png"), "-o"]
    out = str(tmp_path / "o.png")
    assert main([*args, out, "--alpha", "3", "--server", fake_server.url]) == 2
    assert "validation_error (422)" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--device"):
        main([*args, out, "--device", "cuda", "--server", fake_server.url])

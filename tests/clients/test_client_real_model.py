"""The client end to end with the real style transfer (the VGG weights in
``ATELIER_WEIGHTS_DIR``; skipped without them): a print painted tile by tile and a 2 s
video frame by frame, each followed through its progress events to a file. Small by
construction: the print is 1100 x 64 px (above the 1024 px base, so it is a print), the
clip 64 x 48 px."""

from __future__ import annotations

import os
from pathlib import Path

import av
import pytest
from atelier_client import Client, Progress
from client_helpers import noise_png, pixels_of, solid_png
from service_fakes import make_settings, served

from service.app import create_app
from tests.clips import CLIPS, make_clip

pytestmark = [pytest.mark.timeout(300), pytest.mark.weights]


@pytest.fixture(scope="module")
def real_server():
    weights = os.environ.get("ATELIER_WEIGHTS_DIR")
    if not weights or not (Path(weights) / "vgg19-normalised").is_dir():
        pytest.skip("needs the pretrained VGG weights in ATELIER_WEIGHTS_DIR")
    settings = make_settings(
        weights_dir=Path(weights), load_models="adain", max_side=2048, max_batch_wait_ms=0.0
    )
    app = create_app(settings)
    with served(app) as url:
        assert "adain" in app.state.pools, app.state.model_status
        yield url


def test_a_print_is_painted_tile_by_tile_with_progress(real_server, tmp_path):
    photo, _ = noise_png(1100, 64, seed=1)
    seen: list[Progress] = []
    with Client(real_server) as client:
        result = client.stylize(
            photo,
            solid_png((30, 60, 200), 64, 64),
            size=1100,
            preset="realtime",
            output=tmp_path / "print.png",
            progress=seen.append,
        )
    assert result.job is not None and result.job.parameters["size"] == 1100
    assert pixels_of(result.content).shape == (64, 1100, 3)
    tiles = [p for p in seen if p.unit == "tile"]
    assert tiles and tiles[-1].step == tiles[-1].total > 1


def test_a_two_second_video_is_painted_frame_by_frame(real_server, tmp_path):
    clip = make_clip(*CLIPS["mp4"], frames=50)  # 2 s at 25 fps, 64 x 48
    seen: list[Progress] = []
    with Client(real_server) as client:
        result = client.stylize(
            clip,
            solid_png((200, 60, 30), 64, 64),
            preset="realtime",
            output=tmp_path / "painted.mp4",
            progress=seen.append,
        )
    assert result.media_type == "video/mp4"
    with av.open(str(result.path)) as container:
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    assert len(frames) == 50 and frames[0].shape == (48, 64, 3)
    counted = [p for p in seen if p.unit == "frame"]
    assert counted[-1].step == counted[-1].total == 50

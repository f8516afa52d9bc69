"""A stylisation's stored input: one typed ``StyleOptions``, and the inputs the job store
already holds (written before the options were one object) still load.

The headers below are spelled out as the code before ``StyleOptions`` wrote them: the
options as a plain dict with the weights as a list, and, for jobs queued before
``style_scale`` (and ``quality``) existed, without those keys.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from fractions import Fraction

import torch
from PIL import Image

from models.adain.options import StyleOptions
from models.disk_picture import DiskPicture
from models.images import to_png
from models.video import VideoInfo
from service.execution.kinds import work_from_payload
from service.execution.stylize import StylizeWork, UploadedPhoto
from service.execution.video import StylizeVideoWork
from service.images import ImageLimits, decode_image
from service.jobs.records import pack, unpack

CONTENT = torch.arange(3 * 4 * 5, dtype=torch.uint8).reshape(3, 4, 5)
STYLE = torch.full((3, 6, 6), 200, dtype=torch.uint8)


def _stored_stylize(options: dict[str, object], **extra: object) -> bytes:
    header = {
        "kind": "stylize",
        "styles": 1,
        "masks": None,
        "options": options,
        "format": "png",
        "parameters": {"alpha": 0.5},
        **extra,
    }
    return pack(header, [to_png(CONTENT), to_png(STYLE)])


def test_a_stylize_input_stored_with_every_option_loads_as_those_options():
    options = {
        "style_weights": [0.75, 0.25],
        "alpha": 0.5,
        "preserve_color": True,
        "preset": "realtime",
        "style_scale": 1.5,
    }
    work = work_from_payload(_stored_stylize(options, quality=80))
    assert isinstance(work, StylizeWork)
    assert work.options == StyleOptions((0.75, 0.25), 0.5, True, "realtime", 1.5)
    assert work.job().options is work.options  # the batcher's item holds the same object
    assert work.quality == 80
    assert torch.equal(work.content, CONTENT) and torch.equal(work.styles[0], STYLE)


def test_a_stylize_input_stored_before_style_scale_existed_loads_with_its_default():
    options = {"style_weights": None, "alpha": 1.0, "preserve_color": False, "preset": "quality"}
    work = work_from_payload(_stored_stylize(options))
    assert isinstance(work, StylizeWork)
    assert work.options == StyleOptions(preset="quality")
    assert work.options.style_scale == 1.0 and work.quality is None


def test_a_stylize_input_is_stored_as_before():
    """What is written now is what the code before wrote (so a replica still running it
    reads it too): the options as their fields, the weights as a JSON list."""
    options = StyleOptions((0.5, 0.5), 0.25, False, "quality", 0.75)
    work = StylizeWork(CONTENT, (STYLE,), None, options, "webp", {"size": 5}, 90)
    header, _ = unpack(work.to_payload())
    assert header["options"] == {
        "style_weights": [0.5, 0.5],
        "alpha": 0.25,
        "preserve_color": False,
        "preset": "quality",
        "style_scale": 0.75,
    }
    again = work_from_payload(work.to_payload())
    assert isinstance(again, StylizeWork) and again.options == options
    assert json.loads(json.dumps(header)) == header


def test_a_video_input_stored_with_a_dict_of_options_loads_as_those_options():
    info = VideoInfo(
        container="mp4", codec="h264", width=5, height=4, fps=Fraction(30000, 1001),
        frames=3, duration_s=0.1, audio_codec=None,
    )  # fmt: skip
    header = {
        "kind": "stylize_video",
        "info": {**asdict(info), "fps": [30000, 1001]},
        "size": [4, 5],
        "options": {"style_weights": [1.0], "alpha": 0.8, "preserve_color": False,
                    "preset": "quality", "style_scale": 2.0},
        "parameters": {"frames": 3},
    }  # fmt: skip
    work = work_from_payload(pack(header, [b"clip", to_png(STYLE)]))
    assert isinstance(work, StylizeVideoWork)
    assert work.options == StyleOptions((1.0,), 0.8, False, "quality", 2.0)
    assert work.info == info and work.video == b"clip"
    assert StylizeVideoWork.from_payload(*unpack(work.to_payload())).options == work.options


def _jpeg(width: int, height: int) -> bytes:
    pixels = torch.randint(0, 256, (height, width, 3), generator=torch.Generator().manual_seed(3))
    buffer = io.BytesIO()
    Image.fromarray(pixels.to(torch.uint8).numpy()).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def test_a_prints_photo_is_stored_as_uploaded_and_decodes_to_its_planned_size():
    """A print's photo travels as its upload's own bytes (no decode in the request) and
    the worker decodes it, on disk, to the size its request planned."""
    upload, limits = _jpeg(1500, 900), ImageLimits(max_pixels=4_000_000, max_side=2048)
    photo = UploadedPhoto(upload, (720, 1200), limits)
    work = StylizeWork(photo, (STYLE,), None, StyleOptions(), "png", {"size": 1200})
    again = work_from_payload(work.to_payload())
    assert isinstance(again, StylizeWork) and again.content == photo and again.print_size
    _, blobs = unpack(work.to_payload())
    assert blobs[0] == upload
    decoded = again.content.decode()
    assert isinstance(decoded, DiskPicture)
    assert torch.equal(decoded.read(), decode_image(upload, limits, size=1200))


def test_a_prints_input_stored_with_its_photo_as_a_png_still_loads_on_disk():
    """Jobs queued before the photo travelled as uploaded hold it as a PNG."""
    content = torch.randint(0, 256, (3, 300, 1100), generator=torch.Generator().manual_seed(4))
    header = {"kind": "stylize", "styles": 1, "masks": None, "format": "png",
              "options": asdict(StyleOptions()), "parameters": {}}  # fmt: skip
    work = work_from_payload(pack(header, [to_png(content.to(torch.uint8)), to_png(STYLE)]))
    assert isinstance(work, StylizeWork) and isinstance(work.content, DiskPicture)
    assert torch.equal(work.content.read(), content.to(torch.uint8))

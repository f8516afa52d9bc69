"""Decoding uploads in ``service.images``: limits, conversions, shrinking, bounded decodes."""

from __future__ import annotations

import asyncio
import io
import os
import sys
import threading
import time

import corpus
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from icc import SWAPPED_PROFILE
from PIL import Image, ImageCms, ImageFile, ImageOps

from models.images import encode_image
from service.errors import BadImage, DeadlineExceeded, PayloadTooLarge, UnsupportedMediaType
from service.images import (
    DecodeSlots,
    Decoding,
    ImageLimits,
    PreparationBudget,
    decode_image,
    output_size,
)

LIMITS = ImageLimits(max_pixels=4_000_000)


def _as_hwc(tensor: torch.Tensor) -> np.ndarray:
    """The decoded ``(3, H, W)`` uint8 as ``(H, W, 3)`` float64 in [0, 1]."""
    assert tensor.dtype == torch.uint8
    return tensor.permute(1, 2, 0).numpy().astype(np.float64) / 255.0


def _save(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def test_rgb_png_decodes_exactly():
    data = corpus.png(48, 32)
    reference = np.asarray(Image.open(io.BytesIO(data)), dtype=np.float64) / 255.0
    out = decode_image(data, LIMITS)
    assert out.shape == (3, 32, 48) and out.dtype == torch.uint8
    np.testing.assert_array_equal(_as_hwc(out), reference)


def test_exif_orientation_is_applied():
    data = corpus.exif_rotated_jpeg(48, 24)
    raw = np.asarray(Image.open(io.BytesIO(data)), dtype=np.float64) / 255.0  # EXIF ignored
    out = decode_image(data, LIMITS)
    assert out.shape == (3, 48, 24)  # orientation 6: displayed as portrait
    np.testing.assert_array_equal(_as_hwc(out), np.rot90(raw, k=-1))  # 90 deg clockwise


def test_encoded_png_decodes_exactly():
    pixels = torch.randint(0, 256, (3, 17, 23), dtype=torch.uint8)
    decoded = decode_image(encode_image(pixels.float() / 255.0, "png")[0], LIMITS)
    assert torch.equal(decoded, pixels)


def test_palette_transparency_is_composited_over_white():
    out = decode_image(corpus.palette_with_transparency(), LIMITS)
    left, right = _as_hwc(out)[:, :20], _as_hwc(out)[:, 20:]
    np.testing.assert_allclose(left, np.broadcast_to([0.0, 0.0, 1.0], left.shape), atol=1e-7)
    np.testing.assert_allclose(right, np.ones_like(right), atol=1e-7)


def test_partial_alpha_blends_with_white():
    data = _save(Image.new("RGBA", (20, 20), (255, 0, 0, 128)), "PNG")
    out = _as_hwc(decode_image(data, LIMITS))
    a = 128 / 255
    expected = np.array([1.0, 1.0 - a, 1.0 - a])
    np.testing.assert_allclose(out, np.broadcast_to(expected, out.shape), atol=1.5 / 255)


def test_cmyk_jpeg_becomes_rgb():
    out = _as_hwc(decode_image(corpus.cmyk_jpeg(), LIMITS))  # C=0, M=Y=255: red
    assert out[..., 0].mean() > 0.9 and out[..., 1:].mean() < 0.1


def test_sixteen_bit_png_rounds_to_the_nearest_eight_bit_value():
    data = corpus.png_16bit(40, 24)
    raw = np.asarray(Image.open(io.BytesIO(data)), dtype=np.float64)
    assert raw.max() > 255  # really 16-bit
    out = decode_image(data, LIMITS).permute(1, 2, 0).numpy()
    for channel in range(3):
        np.testing.assert_array_equal(out[..., channel], np.round(raw / 65535.0 * 255.0))


def test_greyscale_is_replicated_to_three_channels():
    grey = np.arange(20 * 30, dtype=np.uint8).reshape(20, 30)
    out = _as_hwc(decode_image(_save(Image.fromarray(grey), "PNG"), LIMITS))
    for channel in range(3):
        np.testing.assert_array_equal(out[..., channel], grey / 255.0)


@pytest.mark.parametrize(
    ("data", "error", "code"),
    [
        (corpus.empty(), BadImage, "empty_file"),
        (corpus.text(), UnsupportedMediaType, "unsupported_image_type"),
        (corpus.tiff(), UnsupportedMediaType, "unsupported_image_type"),
        (corpus.truncated_png(), BadImage, "corrupt_image"),
        (corpus.truncated_jpeg(), BadImage, "corrupt_image"),
        (corpus.one_by_one(), BadImage, "image_too_small"),
        (corpus.huge_header(), PayloadTooLarge, "image_too_large"),
        (corpus.animated_gif(), BadImage, "animated_image"),
    ],
)
@pytest.mark.parametrize("read", ["decode", "check"])
def test_bad_uploads_raise_their_documented_error(data, error, code, read):
    """The same errors from a decode and from a print's check (which keeps no pixels)."""
    with pytest.raises(error) as info:
        if read == "decode":
            decode_image(data, LIMITS, name="content")
        else:
            Decoding(LIMITS).check(data, name="content", size=64)
    assert info.value.code == code
    assert info.value.message.startswith("content:")


def test_pixel_limit_is_checked_from_the_header(monkeypatch):
    # 2000 x 2000 is under Pillow's own bomb limit: the service's limit must catch it,
    # and before any pixel is decoded.
    loads = []
    monkeypatch.setattr(Image.Image, "load", lambda self: loads.append(1))
    with pytest.raises(PayloadTooLarge, match="more than 1000000 pixels"):
        decode_image(corpus.png_header(2000, 2000), ImageLimits(max_pixels=1_000_000))
    assert loads == []


@settings(max_examples=60, deadline=None)
@given(
    width=st.integers(16, 5000),
    height=st.integers(16, 5000),
    size=st.integers(16, 1024),
)
def test_output_size_keeps_the_minimum_side_or_refuses(width, height, size):
    limits = ImageLimits(max_pixels=10**9, min_side=16, max_side=1024)
    try:
        out_w, out_h = output_size(width, height, size, limits)
    except BadImage as error:
        assert error.code == "aspect_ratio_too_large" and "64:1" in error.message
        assert 16 * max(width, height) / min(width, height) > 1024 - 1
        return
    assert min(out_w, out_h) >= 16
    assert max(out_w, out_h) <= 1024
    assert out_w <= width and out_h <= height  # never enlarged
    if max(width, height) > size and min(width, height) * size / max(width, height) >= 16:
        assert max(out_w, out_h) == size  # the requested longer side when it allows


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P"])
def test_uploads_and_local_files_are_resized_alike(mode, tmp_path):
    """One resize (``models.images.fit_longer_side`` and ``resize_to``): an upload decoded
    at ``size`` and the file read with ``load_image(max_side=size)`` are the same pixels."""
    from models.images import fit_longer_side, load_image, to_float

    rng = np.random.default_rng(3)
    image = Image.fromarray(rng.integers(0, 256, (90, 130, 3), dtype=np.uint8)).convert(mode)
    path = tmp_path / "photo.png"
    image.save(path)
    for size in (130, 64, 40):  # (above the service's min_side, which load_image lacks)
        decoded = decode_image(path.read_bytes(), LIMITS, size=size)
        assert decoded.shape[-2:] == fit_longer_side(130, 90, size, min_side=16)[::-1]
        assert torch.equal(to_float(decoded)[None], load_image(path, max_side=size))


def test_a_queued_large_decode_gives_up_at_the_deadline_and_small_ones_pass():
    slots = DecodeSlots(1, large_pixels=300)
    busy, release = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=lambda: slots.run(10**6, lambda: (busy.set(), release.wait(30)))
    )
    holder.start()
    try:
        assert busy.wait(30)  # the one pool thread is taken
        with pytest.raises(DeadlineExceeded):
            decode_image(corpus.png(), LIMITS, slots=slots, deadline=time.monotonic() + 0.05)
        assert slots.waiting == 0  # the queued decode was dropped, not left to run
        small = decode_image(corpus.png(16, 16), LIMITS, slots=slots, deadline=0.0)
        assert small.shape == (3, 16, 16)  # under large_pixels: decoded at once
    finally:
        release.set()
        holder.join(30)


@pytest.mark.parametrize("orientation", [None, 6])
@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_a_large_image_is_read_only_on_a_slot_thread(fmt, orientation, monkeypatch):
    """Every pixel read of a large upload runs on the slots' low-priority threads, the
    EXIF orientation included (asking a PNG without an eXIf chunk before its pixels for
    its EXIF decodes them: eXIf may follow IDAT), and the orientation is applied."""
    readers: list[str] = []
    load = ImageFile.ImageFile.load

    def spy(image):
        readers.append(threading.current_thread().name)
        return load(image)

    monkeypatch.setattr(ImageFile.ImageFile, "load", spy)
    exif = Image.Exif()
    if orientation is not None:
        exif[0x0112] = orientation  # 6: shown a quarter turn clockwise, portrait
    data = _save(corpus.noise_rgb(96, 48, seed=3), fmt, exif=exif)
    out = decode_image(data, LIMITS, size=32, slots=DecodeSlots(1, large_pixels=100))
    assert out.shape == ((3, 32, 16) if orientation == 6 else (3, 16, 32))
    assert readers and all(name.startswith("large-decode") for name in readers), readers


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_large_decodes_run_at_a_lower_priority():
    slots = DecodeSlots(1, large_pixels=0, niceness=5)

    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    assert slots.run(1, nice) == min(19, nice() + 5)


# ------------------------------------------------------------- preparation budget
def _budget_scenario(steps):
    """Run ``steps(budget, events)`` on an event loop; ``events`` records grants."""

    async def main():
        budget = PreparationBudget(pixels=3200)  # light: at most 100 pixels
        events: list[str] = []
        return await steps(budget, events), budget, events

    return asyncio.run(main())


async def _holder(budget, events, name, weight, release, deadline=None):
    async with budget.hold(weight, deadline):
        events.append(name)
        await release.wait()


def test_the_budget_grants_what_fits_then_waits_in_arrival_order():
    async def steps(budget, events):
        release = {name: asyncio.Event() for name in "abcd"}
        tasks = [
            asyncio.create_task(_holder(budget, events, "a", 2000, release["a"])),
            asyncio.create_task(_holder(budget, events, "b", 1200, release["b"])),
            asyncio.create_task(_holder(budget, events, "c", 1000, release["c"])),
            asyncio.create_task(_holder(budget, events, "d", 100, release["d"])),
        ]
        await asyncio.sleep(0.01)
        granted_first = list(events)  # a and b fit (3200); c waits; d is light
        waiting_first = budget.waiting
        release["b"].set()  # 1200 back: c (1000) fits
        await asyncio.sleep(0.01)
        granted_then = list(events)
        for event in release.values():
            event.set()
        await asyncio.gather(*tasks)
        return granted_first, waiting_first, granted_then

    (first, waiting, then), budget, _ = _budget_scenario(steps)
    assert first == ["a", "b", "d"] and waiting == 1
    assert then == ["a", "b", "d", "c"]
    assert budget.held == 0 and budget.waiting == 0


def test_a_request_heavier_than_the_budget_runs_alone():
    async def steps(budget, events):
        release = asyncio.Event()
        first = asyncio.create_task(_holder(budget, events, "small", 1000, release))
        await asyncio.sleep(0.01)
        heavy = asyncio.create_task(_holder(budget, events, "heavy", 10_000, asyncio.Event()))
        await asyncio.sleep(0.01)
        before = list(events)
        release.set()
        await first
        await asyncio.sleep(0.01)
        after = list(events)
        heavy.cancel()
        return before, after

    (before, after), _, _ = _budget_scenario(steps)
    assert before == ["small"] and after == ["small", "heavy"]


def test_a_wait_past_the_deadline_or_cancelled_gives_its_place_back():
    async def steps(budget, events):
        release = asyncio.Event()
        holder = asyncio.create_task(_holder(budget, events, "a", 3000, release))
        await asyncio.sleep(0.01)
        with pytest.raises(DeadlineExceeded):
            await _holder(budget, events, "late", 1000, release, time.monotonic() + 0.05)
        cancelled = asyncio.create_task(_holder(budget, events, "gone", 1000, release))
        await asyncio.sleep(0.01)
        waiting = budget.waiting
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        after = budget.waiting
        release.set()
        await holder
        return waiting, after

    (waiting, after), budget, events = _budget_scenario(steps)
    assert (waiting, after) == (1, 0)
    assert events == ["a"] and budget.held == 0


def test_an_early_release_lets_the_next_request_in():
    async def steps(budget, events):
        order = []

        async def early():
            async with budget.hold(3000) as release:
                order.append("prepared")
                release()  # handed off; still inside the block
                await asyncio.sleep(0.02)
                order.append("answered")

        async def next_one():
            await asyncio.sleep(0.005)
            async with budget.hold(3000):
                order.append("next")

        await asyncio.gather(early(), next_one())
        return order

    order, budget, _ = _budget_scenario(steps)
    assert order == ["prepared", "next", "answered"] and budget.held == 0


# ------------------------------------------------------- orientation and colour profiles
@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("size", [None, 32])
def test_every_exif_orientation_is_shown_upright(orientation, size):
    """Each EXIF orientation decodes as Pillow's exif_transpose shows it, also when the
    decode shrinks the image (JPEG draft, resize in the stored orientation)."""
    image = corpus.noise_rgb(64, 40, seed=orientation)
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = _save(image, "PNG", exif=exif)
    upright = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    out = decode_image(data, LIMITS, size=size)
    if size is None:
        np.testing.assert_array_equal(_as_hwc(out), np.asarray(upright, dtype=np.float64) / 255)
    else:
        assert max(out.shape[-2:]) == size
        assert (out.shape[-2] > out.shape[-1]) == (upright.height > upright.width)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
@pytest.mark.parametrize("size", [200, 900, 2000])
def test_a_check_plans_the_size_its_decode_gives(fmt, orientation, size):
    """A print's photo is checked in its request and decoded by the worker to the size
    the check planned: the two agree, rotated, shrunk or kept (never enlarged)."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = _save(corpus.noise_rgb(1200, 500, seed=orientation), fmt, exif=exif)
    limits = ImageLimits(max_pixels=4_000_000, max_side=4096)
    planned = Decoding(limits).check(data, name="content", size=size)
    assert planned == tuple(decode_image(data, limits, size=size).shape[-2:])


def test_a_check_reads_a_jpeg_at_an_eighth_of_its_size(monkeypatch):
    """Every block of a checked JPEG is read, at 1/8 scale: 375 x 125 pixels held for a
    3000 x 1000 photo, not its 3 MP."""
    loaded = []
    load = ImageFile.ImageFile.load

    def spy(self):
        loaded.append(self.size)
        return load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", spy)
    limits = ImageLimits(max_pixels=4_000_000, max_side=4096)
    data = _save(corpus.noise_rgb(3000, 1000, seed=1), "JPEG")
    assert Decoding(limits).check(data, name="content", size=2000) == (667, 2000)
    assert loaded == [(375, 125)]
    with pytest.raises(BadImage, match="truncated or corrupt"):
        Decoding(limits).check(data[: len(data) * 3 // 4], name="content", size=2000)


def test_a_large_rotated_jpeg_shrinks_upright():
    image = Image.linear_gradient("L").resize((3000, 1000)).convert("RGB")
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated a quarter turn clockwise: portrait
    out = decode_image(_save(image, "JPEG", exif=exif), LIMITS, size=600)
    assert out.shape == (3, 600, 200)


def _srgb_of(image: Image.Image, profile: bytes) -> np.ndarray:
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))
    source = ImageCms.ImageCmsProfile(io.BytesIO(profile))
    converted = ImageCms.profileToProfile(image, source, srgb, outputMode="RGB")
    return np.asarray(converted, dtype=np.float64) / 255


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_an_embedded_profile_is_converted_to_srgb(fmt):
    image = corpus.noise_rgb(48, 32, seed=3)
    data = _save(image, fmt, icc_profile=SWAPPED_PROFILE)
    stored = Image.open(io.BytesIO(data)).convert("RGB")  # the pixels as stored
    out = decode_image(data, LIMITS)
    np.testing.assert_allclose(_as_hwc(out), _srgb_of(stored, SWAPPED_PROFILE), atol=1 / 255)
    red = decode_image(
        _save(Image.new("RGB", (32, 32), (255, 0, 0)), fmt, icc_profile=SWAPPED_PROFILE), LIMITS
    )
    assert red[2].float().mean() > 200 and red[0].float().mean() < 40  # its red is sRGB's blue


def test_an_srgb_profile_changes_nothing_and_a_broken_one_is_ignored():
    image = corpus.noise_rgb(48, 32, seed=4)
    plain = decode_image(_save(image, "PNG"), LIMITS)
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    tagged = decode_image(_save(image, "PNG", icc_profile=srgb), LIMITS)
    assert int((tagged.int() - plain.int()).abs().max()) <= 1
    broken = decode_image(_save(image, "PNG", icc_profile=b"not a profile" * 10), LIMITS)
    assert torch.equal(broken, plain)


def test_a_cmyk_jpeg_with_a_profile_of_another_colour_space_decodes_as_without_one():
    cmyk = Image.new("CMYK", (32, 24), (0, 255, 255, 0))  # red ink
    plain = decode_image(_save(cmyk, "JPEG"), LIMITS)
    mismatched = decode_image(_save(cmyk, "JPEG", icc_profile=SWAPPED_PROFILE), LIMITS)
    assert torch.equal(mismatched, plain)
    assert plain[0].float().mean() > 200 and plain[1].float().mean() < 60


def test_images_more_elongated_than_64_to_1_are_refused_whatever_max_side():
    limits = ImageLimits(max_pixels=10**9, max_side=8192)
    assert output_size(6400, 100, 8192, limits) == (6400, 100)
    with pytest.raises(BadImage, match="64:1"):
        output_size(6600, 100, 8192, limits)

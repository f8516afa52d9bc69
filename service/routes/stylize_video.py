"""``POST /v1/stylize`` with a video as ``content``: always a job.

The route sniffs the upload (:func:`models.video.looks_like_video`); a clip is opened and
counted off the event loop within ``video_probe_timeout_s`` (:func:`models.video.probe`),
checked against the video limits, and stored whole as the job's input with its styles;
the worker stylises it chunk by chunk (:mod:`service.execution.video`). The result is the
same container at the same frame rate, fetched from ``GET /v1/jobs/{id}/result``.
"""

from __future__ import annotations

import asyncio

from starlette.concurrency import run_in_threadpool

from models.adain.options import StyleOptions
from models.adain.presets import get_preset, styles_side
from models.video import VideoError, VideoInfo, fit_size, probe
from service.config import Settings
from service.errors import BadVideo, UnsupportedMediaType, ValidationFailed
from service.execution.executor import Served
from service.execution.video import StylizeVideoWork
from service.images import Decoding, ImageLimits


def video_size(info: VideoInfo, size: int | None, settings: Settings) -> tuple[int, int]:
    """``(H, W)`` to paint the frames at: the clip's own size, or scaled down to ``size``
    on the longer side; over ``max_video_side`` it is a 422 that says to ask for less."""
    longer = max(info.width, info.height)
    wanted = longer if size is None else min(size, longer)
    if wanted > settings.max_video_side:
        raise ValidationFailed(
            f"size: the clip's frames are {info.width} x {info.height}; this server paints "
            f"video frames up to {settings.max_video_side} px on the longer side "
            f"(max_video_side): send size={settings.max_video_side} or less"
        )
    return fit_size(info, wanted)


def check_frame_shape(size: tuple[int, int], what: str, limits: ImageLimits) -> None:
    """Refuse (422) frames of ``size`` ``(H, W)`` that break a photo's rule: at least
    ``limits.min_side`` px on the shorter side (16) and at most ``limits.max_aspect``:1
    (64:1), so the encoder's pooling has pixels to work on."""
    shorter, longer = min(size), max(size)
    if shorter < limits.min_side or longer > limits.max_aspect * shorter:
        raise ValidationFailed(
            f"content: the clip's {what} are {size[1]} x {size[0]} px; a video's frames, like "
            f"a photo, need at least {limits.min_side} px on the shorter side and an aspect "
            f"ratio of at most {limits.max_aspect}:1"
        )


def check_clip(info: VideoInfo, frame_size: tuple[int, int], settings: Settings) -> None:
    """Refuse (422, naming the setting) a clip over a video limit."""
    height, width = frame_size
    checks = [
        (
            info.duration_s > settings.max_video_seconds,
            "max_video_seconds",
            f"the clip lasts {info.duration_s:.1f} s",
            f"{settings.max_video_seconds:g} s",
        ),
        (
            info.frames > settings.max_video_frames,
            "max_video_frames",
            f"the clip has {info.frames} frames",
            f"{settings.max_video_frames} frames",
        ),
        (
            float(info.fps) > settings.max_video_fps,
            "max_video_fps",
            f"the clip runs at {float(info.fps):.2f} fps",
            f"{settings.max_video_fps:g} fps",
        ),
        (
            info.frames * height * width > settings.max_video_pixels,
            "max_video_pixels",
            f"{info.frames} frames of {width} x {height} are {info.frames * height * width} pixels",
            f"{settings.max_video_pixels} (ask for a smaller size or a shorter clip)",
        ),
    ]
    for over, setting, what, limit in checks:
        if over:
            raise ValidationFailed(
                f"content: {what}; this server takes at most {limit} ({setting})"
            )


async def probe_upload(data: bytes, settings: Settings) -> VideoInfo:
    """:func:`models.video.probe` on a worker thread, within ``video_probe_timeout_s``;
    its refusals as 415 (no video track, an unsupported codec) or 400 (corrupt)."""
    budget = settings.video_probe_timeout_s
    try:
        return await asyncio.wait_for(
            run_in_threadpool(probe, data, time_budget_s=budget), timeout=budget + 1.0
        )
    except TimeoutError:
        raise BadVideo(f"content: the clip could not be read within {budget:g} s") from None
    except VideoError as exc:
        if exc.reason == "corrupt":
            raise BadVideo(f"content: {exc}") from None
        code = "no_video_track" if exc.reason == "no_video" else "unsupported_video"
        raise UnsupportedMediaType(f"content: {exc}", code=code) from None


async def video_work(
    *,
    video: bytes,
    styles: list[bytes],
    options: StyleOptions,
    size: int | None,
    served: Served,
    settings: Settings,
    decoding: Decoding,
) -> StylizeVideoWork:
    """Check the clip and decode the styles into the job's work."""
    info = await probe_upload(video, settings)
    check_frame_shape((info.height, info.width), "frames", decoding.limits)
    frame_size = video_size(info, size, settings)
    check_frame_shape(frame_size, "frames at this size", decoding.limits)
    check_clip(info, frame_size, settings)
    style_side = styles_side(max(frame_size))
    style_images = await run_in_threadpool(
        lambda: tuple(
            decoding.decode(data, name=f"style[{i}]", size=style_side)
            for i, data in enumerate(styles)
        )
    )
    parameters = {
        "alpha": options.alpha,
        "style_weights": None if options.style_weights is None else list(options.style_weights),
        "preserve_color": options.preserve_color,
        "style_scale": options.style_scale,
        "size": list(frame_size),
        "frames": info.frames,
        "fps": f"{info.fps.numerator}/{info.fps.denominator}",
        "container": info.container,
        **served.model_parameters(),
        **get_preset(options.preset or "quality").parameters(),
    }
    return StylizeVideoWork(video, info, frame_size, style_images, options, parameters)

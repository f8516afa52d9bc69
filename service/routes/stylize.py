"""``POST /v1/stylize``: multipart upload in, stylised image out.

The request is validated into a :class:`~service.execution.stylize.StylizeWork` (a
video: :class:`~service.execution.video.StylizeVideoWork`) that the request's executor
runs (``service.execution.executor``): with ``Prefer: respond-async`` it starts a job
(202, see ``service.routes.jobs``). A client that disconnects cancels its work; a request
whose cost bound (:func:`~models.adain.presets.stylize_cost`) is over its budget is refused
with 422 before anything is decoded: ``max_stylize_pixel_passes`` for a request answered
at once (over it, but within the job budget, the 422 says to send it as a job),
``max_job_stylize_pixel_passes`` for a job. Sizes above 1024 px are painted by
print-size octaves (``models.adain.large``).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated, Literal

import torch
from fastapi import APIRouter, File, Form, Response, UploadFile
from pydantic.json_schema import SkipJsonSchema
from starlette.concurrency import run_in_threadpool

from models.adain.options import StyleOptions
from models.adain.presets import (
    BASE_SIDE,
    MAX_STYLE_SCALE,
    MIN_STYLE_SCALE,
    PresetName,
    get_preset,
    styles_side,
    stylize_cost,
)
from models.adain.stats import check_masks, convex_weights
from models.images import SNIFF_BYTES, check_output_side, sniff
from models.video import looks_like_video
from service.config import Settings
from service.errors import UnsupportedMediaType, ValidationFailed, error_responses, shorten
from service.execution.executor import Accepted
from service.execution.stylize import StylizeWork, UploadedPhoto
from service.images import (
    ACCEPTED_FORMATS,
    HEADER_BYTES,
    DecodeSlots,
    Decoding,
    ImageLimits,
    painted_side,
)
from service.jobs.webhooks import EVENTS_PATTERN, parse_events
from service.routes.deps import DecodeSlotsDep, RateLimited, WorkContext, WorkDep
from service.routes.jobs import job_accepted
from service.routes.stylize_video import video_work

router = APIRouter(prefix="/v1", tags=["stylize"])

MAX_STYLES = 4
#: Masks choose a style per pixel of the whole photo: up to the base size only (above it,
#: the photo is painted in print-size tiles).
MAX_MASK_SIZE = BASE_SIDE
#: The containers a video may come in (sniffed from the bytes, not the name).
VIDEO_FORMATS = "MP4, MOV, WebM, Matroska, AVI, animated GIF"
DEFAULT_SIZE = 512
#: The OpenAPI ``encoding`` of the upload parts: which media types each file part may be.
_IMAGE_PARTS = {"contentType": ", ".join(f"image/{name.lower()}" for name in ACCEPTED_FORMATS)}
_ONE_TO_FOUR = {"minItems": 1, "maxItems": MAX_STYLES}
_WEIGHT = r"(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"
#: What ``style_weights`` looks like, for the schema (``parse_style_weights`` decides).
_WEIGHTS_PATTERN = {"pattern": rf"^ *{_WEIGHT} *(, *{_WEIGHT} *)*$"}


def parse_style_weights(text: str | None, count: int) -> tuple[float, ...] | None:
    """``"3,1"`` -> ``(0.75, 0.25)``: the model's convex weights
    (:func:`~models.adain.stats.convex_weights`) of one number per style; ``None`` when
    absent. Normalised here, so requests whose weights differ by a factor batch together.
    """
    if text is None or not text.strip():
        return None
    try:
        weights = [float(part) for part in text.split(",")]
    except ValueError:
        raise ValidationFailed(
            f"style_weights: expected comma-separated numbers, got {shorten(text)}"
        ) from None
    try:
        return convex_weights(weights, count)
    except ValueError as exc:
        raise ValidationFailed(f"style_weights: {exc}") from None


def check_cost(
    size: int,
    styles: int,
    passes: float,
    settings: Settings,
    *,
    respond_async: bool,
    style_scale: float = 1.0,
) -> None:
    """Refuse (422) a request whose cost bound (:func:`~models.adain.presets.stylize_cost`)
    is over its budget:
    ``max_stylize_pixel_passes`` for a request answered at once, else
    ``max_job_stylize_pixel_passes``. A synchronous request that a job could take is told
    to send it as one (code ``send_as_job``)."""
    pyramid, octaves = stylize_cost(size, styles, passes, style_scale)
    cost = pyramid + octaves
    job_budget = settings.max_job_stylize_pixel_passes
    budget = job_budget if respond_async else settings.max_stylize_pixel_passes
    if cost <= budget:
        return
    base, area = min(size, BASE_SIDE), max(1.0, style_scale) ** 2
    breakdown = (
        f"{base}^2 x (1 content + {styles} styles x {area:g} style area (style_scale)) "
        f"x {passes:g} full-size passes"
        + (f" + {octaves} for the print-size octaves up to size {size}" if octaves else "")
        + f" = {cost} pixel-passes"
    )
    if not respond_async and cost <= job_budget:
        raise ValidationFailed(
            f"{breakdown} is over this server's budget of {budget} for a request answered "
            "at once (max_stylize_pixel_passes); send it as a job with the header "
            f"'Prefer: respond-async' (a job may cost up to {job_budget}), or ask for a "
            "smaller size",
            code="send_as_job",
        )
    setting = "max_job_stylize_pixel_passes" if respond_async else "max_stylize_pixel_passes"
    raise ValidationFailed(
        f"{breakdown} is over this server's budget of {budget} per request ({setting}); "
        "ask for a smaller size, fewer styles, a smaller style_scale or a preset with "
        "fewer passes"
    )


def _decode_all(
    content: bytes,
    styles: list[bytes],
    masks: list[bytes] | None,
    *,
    size: int,
    style_size: int,
    print_size: bool,
    decoding: Decoding,
) -> tuple[torch.Tensor | UploadedPhoto, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...] | None]:
    """Decode and resize every upload to 8-bit RGB (CPU work: runs in the thread pool):
    the photo (and masks) to ``size``, the styles to ``style_size``. A print's photo
    (``print_size``: above the base) is only checked: the worker decodes it in its turn
    (:class:`~service.execution.stylize.UploadedPhoto`)."""
    content_image: torch.Tensor | UploadedPhoto
    if print_size:
        planned = decoding.check(content, name="content", size=size)
        content_image = UploadedPhoto(content, planned, decoding.limits)
    else:
        content_image = decoding.decode(content, name="content", size=size)
    style_images = tuple(
        decoding.decode(data, name=f"style[{i}]", size=style_size) for i, data in enumerate(styles)
    )
    mask_images = None
    if masks is not None:
        height, width = content_image.shape[-2:]
        mask_images = tuple(
            decoding.decode(data, name=f"mask[{i}]", size=(height, width))
            for i, data in enumerate(masks)
        )
    return content_image, style_images, mask_images


def _fields_json(fields: list[object]) -> str:
    """The request's fields as they fingerprint it (an ``Idempotency-Key``'s request)."""
    return json.dumps(fields, sort_keys=True)


def _decoding(context: WorkContext, slots: DecodeSlots, deadline: float | None) -> Decoding:
    """How this request's uploads are decoded: the image limits, the shared decode slots."""
    return Decoding(_limits(context.settings), slots, deadline)


def _limits(settings: Settings) -> ImageLimits:
    return ImageLimits(max_pixels=settings.max_pixels, max_side=settings.max_side)


@router.post(
    "/stylize",
    summary="Render a photo (or a video, as a job) in the style of one to four paintings",
    response_class=Response,
    responses={
        200: {
            "content": {"image/png": {}, "image/jpeg": {}, "image/webp": {}},
            "description": "The stylised image, at the content's aspect, longer side <= size.",
        },
        202: {"description": "with 'Prefer: respond-async': the job started (Location)"},
        **error_responses(400, 401, 409, 413, 415, 422, 429, 503, 504),
    },
    openapi_extra={
        "requestBody": {
            "content": {
                "multipart/form-data": {
                    "encoding": {
                        "content": _IMAGE_PARTS,
                        "style": _IMAGE_PARTS,
                        "mask": _IMAGE_PARTS,
                    }
                }
            }
        }
    },
    dependencies=[RateLimited],
)
async def stylize(
    context: WorkDep,
    slots: DecodeSlotsDep,
    content: Annotated[UploadFile, File(description="The photo.")],
    style: Annotated[
        list[UploadFile],
        File(description="One to four style images.", json_schema_extra=_ONE_TO_FOUR),
    ],
    # Multipart has no null: an absent part is "not given", so the schema shows no null.
    style_weights: Annotated[
        str | SkipJsonSchema[None],
        Form(
            description="Comma-separated weights, one per style.",
            json_schema_extra=_WEIGHTS_PATTERN,
        ),
    ] = None,
    alpha: Annotated[
        float, Form(ge=0.0, le=1.0, allow_inf_nan=False, description="Style strength.")
    ] = 1.0,
    preserve_color: Annotated[bool, Form(description="Keep the photo's colours.")] = False,
    mask: Annotated[
        list[UploadFile] | SkipJsonSchema[None],
        File(description="One mask per style (white = apply).", json_schema_extra=_ONE_TO_FOUR),
    ] = None,
    size: Annotated[
        int | SkipJsonSchema[None],
        Form(
            ge=16,
            description="Longer side of the output, at most max_side; raised where needed so "
            f"that the shorter side is at least 16 px. Default: {DEFAULT_SIZE} for a photo, "
            "the clip's own size for a video (at most max_video_side).",
        ),
    ] = None,
    format: Annotated[
        Literal["png", "jpeg", "webp"],
        Form(description="The result's format (WebP holds at most 16383 px on a side)."),
    ] = "png",
    quality: Annotated[
        int | SkipJsonSchema[None],
        Form(
            ge=1, le=100, description="JPEG or WebP quality (default 92 and 90); PNG is lossless."
        ),
    ] = None,
    preset: Annotated[
        PresetName,
        Form(
            description="quality (default) and realtime: the style matched at 1/8, 1/4, 1/2 "
            "and full size, realtime with fewer, shallower passes (docs/style-transfer.md has both presets' "
            "passes and times)."
        ),
    ] = "quality",
    webhook: Annotated[
        str | SkipJsonSchema[None],
        Form(
            max_length=2048,
            description="A URL to POST the job to when it completes (signed, Standard "
            "Webhooks); its host must be on the server's webhook_allowed_hosts.",
        ),
    ] = None,
    webhook_events: Annotated[
        str | SkipJsonSchema[None],
        Form(
            max_length=64,
            pattern=EVENTS_PATTERN,
            description="Comma-separated: 'completed' (the default), 'progress'.",
        ),
    ] = None,
    style_scale: Annotated[
        float,
        Form(
            ge=MIN_STYLE_SCALE,
            le=MAX_STYLE_SCALE,
            allow_inf_nan=False,
            description="Size of the style's features (strokes, shapes) in the output: 1 "
            "keeps their size in the painting at the photo's size, 2 doubles it, 0.5 halves it.",
        ),
    ] = 1.0,
    previews: Annotated[
        bool,
        Form(
            description="For a job: 'preview' events in its event stream, a small JPEG "
            "(at most 256 px) after each stage of the pyramid, at most two a second. Not "
            "for a video, nor a size above print_size_above (painted in tiles).",
        ),
    ] = False,
) -> Response:
    served = await context.models.lookup("adain")
    if not 1 <= len(style) <= MAX_STYLES:
        raise ValidationFailed(f"style: send 1 to {MAX_STYLES} style images, got {len(style)}")
    weights = parse_style_weights(style_weights, len(style))
    options = StyleOptions(weights, alpha, preserve_color, preset, style_scale)
    # a photo's bytes are read in its turn, below; a GIF is read whole to count its frames
    head = await content.read(SNIFF_BYTES)
    await content.seek(0)
    video = await content.read() if sniff(head) in ("video", "gif") else b""
    is_video = False
    if video:
        is_video = await run_in_threadpool(looks_like_video, video)
    if is_video:
        context.executor.require_job(context.respond_async, "content: a video")
        if mask is not None:
            raise ValidationFailed("mask: masks are not supported for a video")
        hook = await context.executor.webhook(webhook, parse_events(webhook_events))
        await context.executor.check_admission(context.respond_async)
        styles = [await upload.read() for upload in style]
        clip = await video_work(
            video=video,
            styles=styles,
            options=options,
            size=size,
            served=served,
            settings=context.settings,
            decoding=_decoding(context, slots, context.executor.deadline()),
        )
        submission = context.submission(
            [_fields_json([asdict(options), size, webhook, webhook_events]), video, *styles],
            webhook=hook,
        )
        accepted = await context.executor.submit(clip, served, submission)
        assert isinstance(accepted, Accepted)  # a video: always a job
        return job_accepted(accepted.job)
    del video
    await content.seek(0)
    size = DEFAULT_SIZE if size is None else size
    if size > context.settings.max_side:
        raise ValidationFailed(f"size: at most {context.settings.max_side}, got {size}")
    try:
        check_output_side(format, size)
    except ValueError as exc:
        raise ValidationFailed(f"format: {exc}") from None
    passes = served.full_size_passes(preset)
    # the cost of what is painted: a photo smaller than ``size`` is painted at its own
    painted = painted_side(await content.read(HEADER_BYTES), size, _limits(context.settings))
    await content.seek(0)
    check_cost(
        painted,
        len(style),
        passes,
        context.settings,
        respond_async=context.respond_async,
        style_scale=style_scale,
    )
    if mask is not None:
        if size > MAX_MASK_SIZE:
            raise ValidationFailed(f"mask: masks are supported up to size {MAX_MASK_SIZE}")
        try:
            check_masks(len(mask), len(style), weighted=weights is not None)
        except ValueError as exc:
            raise ValidationFailed(f"mask: {exc}") from None
    hook = await context.executor.webhook(webhook, parse_events(webhook_events))
    # refuse before anything is decoded
    await context.executor.check_admission(context.respond_async)
    if head and sniff(head) is None:  # neither an image nor a video; empty: 400 below
        raise UnsupportedMediaType(
            f"content: neither an image ({', '.join(ACCEPTED_FORMATS)}) nor a video "
            f"({VIDEO_FORMATS}), whatever its name says",
            code="unsupported_image_type",
        )
    deadline = context.executor.deadline()
    style_side = styles_side(size)
    weight = painted * painted * (1 + (0 if mask is None else len(mask)))
    weight += len(style) * style_side**2
    # the preparation budget is given back once the work is handed off
    async with context.executor.preparing(weight, deadline):
        uploads = [await content.read(), *[await upload.read() for upload in style]]
        mask_bytes = None if mask is None else [await upload.read() for upload in mask]
        content_image, style_images, mask_images = await run_in_threadpool(
            _decode_all,
            uploads[0],
            uploads[1:],
            mask_bytes,
            size=size,
            style_size=style_side,
            print_size=painted > BASE_SIDE,
            decoding=_decoding(context, slots, deadline),
        )
        parameters = {
            "alpha": alpha,
            "style_weights": None if weights is None else list(weights),
            "preserve_color": preserve_color,
            "masks": len(mask) if mask is not None else 0,
            "size": size,
            "style_scale": style_scale,
            "content_size": list(content_image.shape[-2:]),
            **served.model_parameters(),
            **get_preset(preset).parameters(),
        }
        work = StylizeWork(
            content_image, style_images, mask_images, options, format, parameters, quality
        )
        submission = context.submission(
            [
                _fields_json([asdict(options), size, format, quality, webhook, webhook_events]),
                *uploads,
                *(mask_bytes or []),
            ],
            webhook=hook,
            previews=previews and size <= BASE_SIDE,
        )
        result = await context.executor.submit(work, served, submission)
    if isinstance(result, Accepted):
        return job_accepted(result.job)
    return Response(result.images[0], media_type=result.media_type)

"""``POST /v1/stylize``: multipart upload in, stylised image out."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, File, Form, Request, Response, UploadFile
from starlette.concurrency import run_in_threadpool

from models.adain.presets import PresetName
from service.auth import require_api_key
from service.errors import ValidationFailed
from service.images import (
    ImageLimits,
    decode_image,
    encode_image,
    resize_max_side,
    resize_to,
    to_grey_mask,
)
from service.routes import SettingsDep, pool_of, remaining_seconds
from service.workers import StylizeJob, WorkerPool

router = APIRouter(prefix="/v1", tags=["stylize"], dependencies=[Depends(require_api_key)])

MAX_STYLES = 4
DEFAULT_SIZE = 512
StylizePool = Annotated[WorkerPool, Depends(pool_of("adain"))]


def parse_style_weights(text: str | None, count: int) -> tuple[float, ...] | None:
    """``"1,2.5"`` -> ``(1.0, 2.5)``: one finite non-negative weight per style, sum > 0."""
    if text is None or not text.strip():
        return None
    try:
        weights = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise ValidationFailed(
            f"style_weights: expected comma-separated numbers, got {text!r}"
        ) from None
    if len(weights) != count:
        raise ValidationFailed(f"style_weights: {len(weights)} weights for {count} styles")
    if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise ValidationFailed("style_weights: weights must be finite, >= 0 and not all 0")
    return weights


def _build_job(
    content: bytes,
    styles: list[bytes],
    masks: list[bytes] | None,
    *,
    size: int,
    limits: ImageLimits,
    style_weights: tuple[float, ...] | None,
    alpha: float,
    preserve_color: bool,
    preset: str,
) -> StylizeJob:
    """Decode and resize every upload (CPU work: runs in the thread pool)."""
    content_image = resize_max_side(decode_image(content, limits, name="content"), size)
    style_images = tuple(
        resize_max_side(decode_image(data, limits, name=f"style[{i}]"), size)
        for i, data in enumerate(styles)
    )
    mask_images = None
    if masks is not None:
        height, width = content_image.shape[-2:]
        mask_images = tuple(
            resize_to(to_grey_mask(decode_image(data, limits, name=f"mask[{i}]")), (height, width))
            for i, data in enumerate(masks)
        )
    return StylizeJob(
        content=content_image,
        styles=style_images,
        style_weights=style_weights,
        alpha=alpha,
        preserve_color=preserve_color,
        masks=mask_images,
        preset=preset,
    )


@router.post(
    "/stylize",
    summary="Render a photo in the style of one to four paintings (AdaIN)",
    response_class=Response,
    responses={
        200: {
            "content": {"image/png": {}, "image/jpeg": {}, "image/webp": {}},
            "description": "The stylised image, at the content's aspect, longer side <= size.",
        },
        400: {"description": "an upload is not a usable image"},
        413: {"description": "upload or image too large"},
        415: {"description": "not a supported image format"},
        422: {"description": "a field is invalid"},
        429: {"description": "overloaded; see Retry-After"},
        503: {"description": "model not loaded, or shutting down"},
        504: {"description": "past the request deadline"},
    },
)
async def stylize(
    request: Request,
    settings: SettingsDep,
    pool: StylizePool,
    content: Annotated[UploadFile, File(description="The photo.")],
    style: Annotated[list[UploadFile], File(description="One to four style images.")],
    style_weights: Annotated[
        str | None, Form(description="Comma-separated weights, one per style.")
    ] = None,
    alpha: Annotated[float, Form(ge=0.0, le=1.0, description="Style strength.")] = 1.0,
    preserve_color: Annotated[bool, Form(description="Keep the photo's colours.")] = False,
    mask: Annotated[
        list[UploadFile] | None, File(description="One mask per style (white = apply).")
    ] = None,
    size: Annotated[
        int, Form(ge=16, description="Longer side of the output, at most max_side.")
    ] = DEFAULT_SIZE,
    format: Annotated[Literal["png", "jpeg", "webp"], Form()] = "png",
    preset: Annotated[
        PresetName,
        Form(
            description="quality (default): four passes at full size; realtime: two passes "
            "at a 192 px working size, the photo's detail restored (about 2.5x faster)."
        ),
    ] = "quality",
) -> Response:
    if not 1 <= len(style) <= MAX_STYLES:
        raise ValidationFailed(f"style: send 1 to {MAX_STYLES} style images, got {len(style)}")
    if size > settings.max_side:
        raise ValidationFailed(f"size: at most {settings.max_side}, got {size}")
    weights = parse_style_weights(style_weights, len(style))
    if mask is not None:
        if len(mask) != len(style):
            raise ValidationFailed(f"mask: one mask per style: {len(mask)} for {len(style)}")
        if weights is not None:
            raise ValidationFailed("mask: masks and style_weights cannot be combined")
    job = await run_in_threadpool(
        _build_job,
        await content.read(),
        [await upload.read() for upload in style],
        None if mask is None else [await upload.read() for upload in mask],
        size=size,
        limits=ImageLimits(max_pixels=settings.max_pixels),
        style_weights=weights,
        alpha=alpha,
        preserve_color=preserve_color,
        preset=preset,
    )
    image = await pool.submit(job, timeout_s=remaining_seconds(request, settings))
    data, media_type = await run_in_threadpool(encode_image, image, format)
    return Response(data, media_type=media_type)

"""``POST /v1/stylize``: multipart upload in, stylised image out.

With ``Prefer: respond-async`` the same request starts a job (202, see
``service.routes.jobs``). A client that disconnects cancels its work; a request whose
cost bound (``size^2 x (1 + styles x max(1, style_scale)^2) x passes``) is over ``max_stylize_pixel_passes`` is
refused with 422 before anything is decoded.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, File, Form, Request, Response, UploadFile
from pydantic.json_schema import SkipJsonSchema
from starlette.concurrency import run_in_threadpool

from models.adain.presets import MAX_STYLE_SCALE, MIN_STYLE_SCALE, PresetName, get_preset
from service.errors import ValidationFailed, shorten
from service.images import (
    ACCEPTED_FORMATS,
    Decoding,
    ImageLimits,
    encode_image,
    to_grey_mask,
)
from service.jobs import JobResult, Progress
from service.model_types import StyleTransferModel
from service.routes import (
    SettingsDep,
    deadline_of,
    error_responses,
    pool_of,
    remaining_seconds,
    unless_disconnected,
)
from service.routes.jobs import RespondAsync, start_job
from service.workers import StylizeJob, WorkerPool

router = APIRouter(prefix="/v1", tags=["stylize"])

MAX_STYLES = 4
DEFAULT_SIZE = 512
StylizePool = Annotated[WorkerPool[StyleTransferModel], Depends(pool_of("adain"))]
#: The OpenAPI ``encoding`` of the upload parts: which media types each file part may be.
_IMAGE_PARTS = {"contentType": ", ".join(f"image/{name.lower()}" for name in ACCEPTED_FORMATS)}
_ONE_TO_FOUR = {"minItems": 1, "maxItems": MAX_STYLES}
_WEIGHT = r"(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"
#: What ``style_weights`` looks like, for the schema (``parse_style_weights`` decides).
_WEIGHTS_PATTERN = {"pattern": rf"^ *{_WEIGHT} *(, *{_WEIGHT} *)*$"}


def parse_style_weights(text: str | None, count: int) -> tuple[float, ...] | None:
    """``"1,2.5"`` -> ``(0.4, 1.0)``: one finite non-negative weight per style, not all 0.

    The weights are scaled by their maximum (the model only uses their ratios), so
    huge ones such as ``1e308,1e308`` cannot overflow when the model sums them, and
    requests whose weights differ by a factor batch together.
    """
    if text is None or not text.strip():
        return None
    parts = text.split(",")
    if len(parts) != count:
        raise ValidationFailed(f"style_weights: {len(parts)} weights for {count} styles")
    try:
        weights = tuple(float(part) for part in parts)
    except ValueError:
        raise ValidationFailed(
            f"style_weights: expected comma-separated numbers, got {shorten(text)}"
        ) from None
    if any(not math.isfinite(w) or w < 0 for w in weights) or max(weights) <= 0:
        raise ValidationFailed("style_weights: weights must be finite, >= 0 and not all 0")
    peak = max(weights)
    return tuple(w / peak for w in weights)


def check_cost(
    size: int, styles: int, pool: WorkerPool, budget: int, style_scale: float = 1.0
) -> None:
    """Refuse (422) a request whose cost bound is over ``budget`` pixel-passes.

    The bound needs nothing decoded: the content is resized to at most ``size`` on its
    longer side and every style to at most ``style_scale x size`` (a style scale above 1
    enlarges it), and each of the model's passes runs the encoder over the content (and,
    once, over each style), so
    ``cost = size^2 x (1 + styles x max(1, style_scale)^2) x passes``.
    """
    passes = len(pool.model_parameters()["levels"])
    style_area = max(1.0, style_scale) ** 2
    cost = math.ceil(size * size * (1 + styles * style_area) * passes)
    if cost > budget:
        raise ValidationFailed(
            f"size^2 x (1 content + {styles} styles x {style_area:g} style area) x {passes} "
            f"passes = {size}^2 x {1 + styles * style_area:g} x {passes} = {cost} "
            f"pixel-passes is over this server's budget of {budget} per request "
            "(max_stylize_pixel_passes); ask for a smaller size, fewer styles or a smaller "
            "style_scale"
        )


def _build_job(
    content: bytes,
    styles: list[bytes],
    masks: list[bytes] | None,
    *,
    size: int,
    decoding: Decoding,
    style_weights: tuple[float, ...] | None,
    alpha: float,
    preserve_color: bool,
    preset: str,
    style_scale: float,
) -> StylizeJob:
    """Decode and resize every upload (CPU work: runs in the thread pool)."""
    content_image = decoding.decode(content, name="content", size=size)
    style_images = tuple(
        decoding.decode(data, name=f"style[{i}]", size=size) for i, data in enumerate(styles)
    )
    mask_images = None
    if masks is not None:
        shape = tuple(content_image.shape[-2:])
        mask_images = tuple(
            to_grey_mask(decoding.decode(data, name=f"mask[{i}]", size=shape))
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
        style_scale=style_scale,
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
        202: {"description": "with 'Prefer: respond-async': the job started (Location)"},
        **error_responses(400, 401, 413, 415, 422, 429, 503, 504),
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
)
async def stylize(
    request: Request,
    settings: SettingsDep,
    pool: StylizePool,
    respond_async: RespondAsync,
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
        int,
        Form(
            ge=16,
            description="Longer side of the output, at most max_side; raised where needed so "
            "that the shorter side is at least 16 px.",
        ),
    ] = DEFAULT_SIZE,
    format: Annotated[Literal["png", "jpeg", "webp"], Form()] = "png",
    preset: Annotated[
        PresetName,
        Form(
            description="quality (default) and realtime: the style matched at 1/4, 1/2 and "
            "full size, realtime with fewer passes (docs/style-transfer.md has both presets' "
            "passes and times)."
        ),
    ] = "quality",
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
) -> Response:
    if not 1 <= len(style) <= MAX_STYLES:
        raise ValidationFailed(f"style: send 1 to {MAX_STYLES} style images, got {len(style)}")
    if size > settings.max_side:
        raise ValidationFailed(f"size: at most {settings.max_side}, got {size}")
    check_cost(size, len(style), pool, settings.max_stylize_pixel_passes, style_scale)
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
        decoding=Decoding(
            ImageLimits(max_pixels=settings.max_pixels, max_side=settings.max_side),
            request.app.state.decode_slots,
            deadline_of(request, settings),
        ),
        style_weights=weights,
        alpha=alpha,
        preserve_color=preserve_color,
        preset=preset,
        style_scale=style_scale,
    )
    parameters = {
        "alpha": alpha,
        "style_weights": list(weights) if weights is not None else None,
        "preserve_color": preserve_color,
        "masks": len(mask) if mask is not None else 0,
        "size": size,
        "style_scale": style_scale,
        "content_size": list(job.content.shape[-2:]),
        **pool.model_parameters(),
        **preset_parameters(preset),
        **pool.provenance(),
    }

    async def work(progress: Progress | None, timeout_s: float | None) -> tuple[bytes, str]:
        reporter = None if progress is None else progress.reporter(0)
        image = await pool.submit(job, timeout_s=timeout_s, on_progress=reporter)
        return await run_in_threadpool(encode_image, image, format, parameters)

    if respond_async:

        async def job_work(progress: Progress) -> JobResult:
            data, media_type = await work(progress, None)
            return JobResult([data], media_type, {"parameters": parameters})

        return start_job(
            request, "stylize", parts=1, unit="pass", parameters=parameters, work=job_work
        )
    timeout = remaining_seconds(request, settings)
    data, media_type = await unless_disconnected(request, work(None, timeout))
    return Response(data, media_type=media_type)


def preset_parameters(name: str) -> dict:
    """The preset and its passes, coarse stage first (they replace the model's levels)."""
    preset = get_preset(name)
    return {"preset": name, "levels": [level for stage in preset.stages for level in stage.levels]}

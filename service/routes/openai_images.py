"""``POST /v1/images/generations``: OpenAI's Images API in front of the DiT.

Clients written for OpenAI's image API (its SDKs, tools that take a base URL) work
unchanged: the body is a :class:`~service.routes.generate.GenerateRequest` spelled the
OpenAI way (``n`` for ``num_images``), run by the ``/v1/generate`` handler itself, and
answered as ``{"created": <unix time>, "data": [{"b64_json": <PNG>}, ...]}``.

Fields:

- honoured: ``prompt``, ``n``, ``size`` (``"auto"`` or the model's native ``"WxH"``; a
  square up to 1024 px whose side is a multiple of the native one is the same drawing
  enlarged by Lanczos resampling, said in the ``X-Atelier-Upscaled-From`` header and the
  PNG's ``upscaled_from`` text: nothing is invented),
  ``response_format`` (``"b64_json"``), ``output_format`` (``"png"``), and Atelier's own
  ``negative_prompt``, ``steps``, ``guidance_scale``, ``seed``, ``sampler``, ``plan_layout``;
- accepted and ignored: :data:`IGNORED_FIELDS`;
- refused with a 400 that names the field: any other size (the model draws squares at
  one size), ``response_format="url"`` (nothing is stored to link
  to), ``output_format`` other than png, ``stream=true``, and unknown fields.

Errors raised while serving this route leave in OpenAI's envelope
``{"error": {"message", "type", "param", "code"}}`` (``code`` is the service's own, see
``service.errors``); a 422 becomes a 400 as OpenAI answers invalid parameters, so the
SDKs raise ``BadRequestError``. Rejections made before routing (the drain gate, a
declared body over the cap) keep the service-wide envelope, which the SDKs read too.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field, field_validator
from starlette.concurrency import run_in_threadpool

from models.images import enlarge_png
from service.errors import ErrorBody, ServiceError, error_responses
from service.routes.deps import (
    CatalogDep,
    ExecutorDep,
    IdempotencyKey,
    RateLimited,
    SettingsDep,
    WorkContext,
)
from service.routes.generate import GenerateRequest, GenerateResponse, generate

#: The largest side an answer's drawing is enlarged to (OpenAI's biggest square).
MAX_UPSCALED_SIDE = 1024
#: Square sides OpenAI's clients commonly ask for, named in the size error.
COMMON_SIDES = (256, 512, 1024)

#: OpenAI request fields that are accepted (typed as OpenAI types them) and do nothing here.
IGNORED_FIELDS = (
    "model",
    "quality",
    "style",
    "user",
    "background",
    "moderation",
    "output_compression",
    "partial_images",
    "complexity",
    "safety_identifier",
)


class InvalidParameter(ServiceError):
    """A request field the model cannot honour; ``param`` names it in OpenAI's envelope."""

    status_code, code = 400, "invalid_parameter"

    def __init__(self, message: str, *, param: str | None = None, **kwargs: Any) -> None:
        super().__init__(f"{param}: {message}" if param else message, **kwargs)
        self.param = param


def openai_error_type(status: int) -> str:
    """OpenAI's ``error.type`` for a status: client mistakes, rate limits, server trouble."""
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def _param_of(exc: Exception) -> str | None:
    """The request field an error is about: ``InvalidParameter.param``, or the first
    validation error's location below ``body`` (``("body", "n")`` -> ``"n"``)."""
    if isinstance(exc, RequestValidationError):
        for error in exc.errors():
            if error.get("type") == "json_invalid":  # its location is a byte offset
                return None
            where = [str(part) for part in error.get("loc", ()) if part != "body"]
            if where:
                return ".".join(where)
        return None
    return getattr(exc, "param", None)


async def _render_openai_error(request: Request, exc: Exception) -> Response:
    """The service's own answer to ``exc`` (its registered handler: same message, code,
    status and headers), reshaped into OpenAI's envelope."""
    handlers = request.app.exception_handlers
    handler = next(handlers[cls] for cls in type(exc).__mro__ if cls in handlers)
    rendered = await handler(request, exc)
    error = json.loads(rendered.body)["error"]
    status = 400 if rendered.status_code == 422 else rendered.status_code
    headers = {
        name: value
        for name, value in rendered.headers.items()
        if name not in ("content-length", "content-type")
    }
    body = {
        "error": {
            "message": error["message"],
            "type": openai_error_type(status),
            "param": _param_of(exc),
            "code": error["code"],
        }
    }
    return JSONResponse(body, status_code=status, headers=headers)


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, rate_limit_error or server_error.")
    param: str | None = Field(description="The request field at fault, when one is.")
    code: str = Field(description="The service's own error code (service.errors).")


class OpenAIErrorBody(BaseModel):
    """OpenAI's error envelope."""

    error: OpenAIErrorDetail


class OpenAIErrorRoute(APIRoute):
    """An ``APIRoute`` whose errors (auth, body validation, the handler's own) are
    answered in OpenAI's envelope; the rest of the service keeps its own."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def handle_with_openai_errors(request: Request) -> Response:
            try:
                return await handle(request)
            except Exception as exc:
                return await _render_openai_error(request, exc)

        return handle_with_openai_errors


router = APIRouter(
    prefix="/v1",
    tags=["openai"],
    route_class=OpenAIErrorRoute,
)


class ImageGenerationRequest(GenerateRequest):
    """OpenAI's ``images.generate`` body; everything of ``GenerateRequest`` but
    ``num_images``, which is spelled ``n``."""

    num_images: int = Field(default=1, ge=1, le=8, alias="n", description="Images to draw.")
    size: str | None = Field(
        default=None,
        pattern=r"^(auto|[0-9]{1,5}x[0-9]{1,5})$",
        description="'auto', the model's native 'WxH' (GET /v1/models), or a square whose side "
        "is a multiple of it up to 1024 (the drawing enlarged); others are refused.",
    )
    response_format: Literal["b64_json"] | None = Field(
        default=None, description="Only 'b64_json': the service stores no images to link to."
    )
    output_format: Literal["png"] | None = Field(default=None, description="Only 'png'.")
    stream: bool | None = Field(
        default=None, description="Only false: streaming partial images is not supported."
    )
    model: str | None = Field(default=None, description="Ignored: one text-to-image model.")
    quality: str | None = Field(default=None, description="Ignored.")
    style: str | None = Field(default=None, description="Ignored.")
    user: str | None = Field(default=None, description="Ignored.")
    background: str | None = Field(default=None, description="Ignored.")
    moderation: str | None = Field(default=None, description="Ignored.")
    output_compression: int | None = Field(default=None, description="Ignored (PNG).")
    partial_images: int | None = Field(default=None, description="Ignored (no streaming).")
    complexity: str | None = Field(default=None, description="Ignored.")
    safety_identifier: str | None = Field(default=None, description="Ignored.")

    @field_validator("response_format", mode="before")
    @classmethod
    def _explain_url(cls, value: Any) -> Any:
        if value == "url":
            raise ValueError("'url' is not supported (no images are stored); use 'b64_json'")
        return value

    @field_validator("stream")
    @classmethod
    def _refuse_streaming(cls, value: bool | None) -> bool | None:
        if value:
            raise ValueError(
                "streaming partial images is not supported; send false or leave it out"
            )
        return value


class GeneratedImage(BaseModel):
    b64_json: str = Field(description="A base64-encoded PNG.")
    revised_prompt: str | None = Field(
        default=None,
        description="The prompt as drawn, in the caption grammar the model was trained on "
        "(absent when nothing of the prompt was understood and it was drawn as given).",
    )


class ImagesResponse(BaseModel):
    created: int = Field(description="Unix time of the answer, in seconds.")
    data: list[GeneratedImage]


@router.post(
    "/images/generations",
    summary="Generate images from a text prompt, OpenAI-compatible (DiT)",
    response_model=ImagesResponse,
    response_model_exclude_none=True,
    # The drain gate and a declared oversize body are refused before routing, in the
    # service's envelope: 413 and 503 document both. "4XX" keeps FastAPI from promising
    # its 422, which this route never sends.
    responses={
        **error_responses(400, 401, 409, 429, 504, model=OpenAIErrorBody),
        **error_responses(413, 503, model=OpenAIErrorBody | ErrorBody),
        "4XX": {"model": OpenAIErrorBody, "description": "none other: invalid fields answer 400"},
    },
    dependencies=[RateLimited],
)
async def create_images(
    body: ImageGenerationRequest,
    request: Request,
    response: Response,
    settings: SettingsDep,
    models: CatalogDep,
    executor: ExecutorDep,
    idempotency_key: IdempotencyKey,
) -> ImagesResponse:
    served = await models.lookup("dit")
    side = answer_side(body.size, served.image_size)
    # answered at once, never as a job: no Prefer header is read here
    context = WorkContext(
        request, settings, models, executor, respond_async=False, idempotency_key=idempotency_key
    )
    answer = await generate(body, context, accept=None)
    assert isinstance(answer, GenerateResponse)  # no Accept: image/png, no Prefer here
    images = answer.images
    if side != served.image_size:
        images = await run_in_threadpool(_enlarged, images, side)
        response.headers["X-Atelier-Upscaled-From"] = f"{served.image_size}x{served.image_size}"
    return ImagesResponse(
        created=int(time.time()),
        data=[GeneratedImage(b64_json=b64, revised_prompt=answer.understood) for b64 in images],
    )


def answer_side(size: str | None, native: int) -> int:
    """The side of the answer's square images for OpenAI's ``size``: the model's own
    (``None``, ``"auto"``, ``"{native}x{native}"``), or a square whose side is a multiple
    of it up to :data:`MAX_UPSCALED_SIDE`, which the drawing is enlarged to.

    Raises:
        InvalidParameter: any other size, naming the sizes there are.
    """
    if size in (None, "auto"):
        return native
    assert size is not None
    width, height = (int(part) for part in size.split("x"))
    if width == height and width % native == 0 and native <= width <= MAX_UPSCALED_SIDE:
        return width
    sides = [native * factor for factor in range(1, MAX_UPSCALED_SIDE // native + 1)]
    offered = [f"{s}x{s}" for s in sides if s == native or s in COMMON_SIDES]
    raise InvalidParameter(
        param="size",
        message=f"this model draws {native}x{native} images, enlarged to a square side that "
        f"is a multiple of {native} up to {MAX_UPSCALED_SIDE} (e.g. {', '.join(offered)}) or "
        f"'auto'; got {size!r}",
    )


def _enlarged(images: list[str], side: int) -> list[str]:
    """Base64 PNGs enlarged to ``side`` px (:func:`models.images.enlarge_png`)."""
    return [
        base64.b64encode(enlarge_png(base64.b64decode(image), side)).decode("ascii")
        for image in images
    ]

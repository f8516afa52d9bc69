"""``POST /v1/generate``: a prompt in, base64 PNGs and their seeds out.

The request is validated into a :class:`~service.execution.generate.GenerateWork` that
the request's executor runs (``service.execution.executor``): with ``Prefer:
respond-async`` it starts a job (202, see ``service.routes.jobs``). A client that
disconnects cancels its images; a request whose cost (:func:`generate_cost`: steps x
images) is over ``max_image_steps`` is refused with 422 (:func:`check_generate_cost`, as
``service.routes.stylize.check_cost`` refuses a stylisation over its budget).
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, get_args

from fastapi import APIRouter, Header, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from models.diffusion.random import MAX_SEED, consecutive_seeds
from service.config import Settings
from service.errors import ValidationFailed, error_responses
from service.execution.executor import Accepted
from service.execution.generate import GenerateWork
from service.jobs.webhooks import WebhookEvent
from service.routes.deps import RateLimited, WorkDep
from service.routes.jobs import job_accepted

router = APIRouter(prefix="/v1", tags=["generate"])

#: Images of one request, at most.
MAX_NUM_IMAGES = 8


def generate_cost(steps: int, images: int) -> int:
    """A generate request's cost in image-steps: sampler steps x images."""
    return steps * images


def check_generate_cost(steps: int, images: int, settings: Settings) -> None:
    """Refuse (422) a request whose cost (:func:`generate_cost`) is over this server's
    budget, ``max_image_steps``."""
    cost = generate_cost(steps, images)
    if cost > settings.max_image_steps:
        raise ValidationFailed(
            f"steps x num_images = {steps} x {images} = {cost} is over this "
            f"server's budget of {settings.max_image_steps} image-steps per request "
            "(max_image_steps); ask for fewer steps or images"
        )


class GenerateRequest(BaseModel):
    # strict: a JSON value of another type than the schema says (``"5"`` for 5, ``0`` for
    # false) is refused, not coerced; but see below.
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _integral_numbers_are_integers(cls, data: Any) -> Any:
        """``5.0`` where an integer goes becomes ``5``: JSON Schema counts it an integer."""
        if not isinstance(data, dict):
            return data
        integer_keys = {
            field.alias or name
            for name, field in cls.model_fields.items()
            if int in (field.annotation, *get_args(field.annotation))
        }
        return {
            key: int(value)
            if key in integer_keys and isinstance(value, float) and value.is_integer()
            else value
            for key, value in data.items()
        }

    prompt: str = Field(min_length=1, max_length=500)
    negative_prompt: str | None = Field(default=None, max_length=500)
    num_images: int = Field(default=1, ge=1, le=MAX_NUM_IMAGES)
    steps: int | None = Field(default=None, ge=1, le=1000, description="Model default if unset.")
    guidance_scale: float | None = Field(default=None, ge=0.0, le=50.0, allow_inf_nan=False)
    seed: int | None = Field(
        default=None, ge=0, le=MAX_SEED, description="Image i uses seed + i; random if unset."
    )
    sampler: str | None = Field(default=None, description="One of the model's samplers.")
    plan_layout: bool | None = Field(
        default=None,
        description="Plan a caption naming several objects into one-object prompts at grid "
        "cells and denoise each cell under its own prompt; model default (on) if unset.",
    )
    webhook: str | None = Field(
        default=None,
        max_length=2048,
        description="A URL to POST the job to when it completes (signed, Standard "
        "Webhooks); its host must be on the server's webhook_allowed_hosts.",
    )
    webhook_events: list[WebhookEvent] | None = Field(
        default=None,
        max_length=2,
        description="Which events to deliver: 'completed' (the default), 'progress'.",
    )
    previews: bool = Field(
        default=False,
        description="For a job: 'preview' events in its event stream, a small JPEG of "
        "the first image's estimate every few sampler steps, at most two a second.",
    )

    @field_validator("prompt")
    @classmethod
    def _prompt_has_text(cls, prompt: str) -> str:
        if not prompt.strip():
            raise ValueError("the prompt is only whitespace")
        return prompt


class GenerateResponse(BaseModel):
    images: list[str] = Field(description="Base64-encoded PNGs, one per image.")
    seeds: list[int]
    steps: int
    guidance_scale: float
    sampler: str
    plan_layout: bool
    parameters: dict[str, Any] = Field(
        description="How the images were made (also in each PNG's text chunks): prompt, "
        "negative_prompt, steps, guidance_scale, sampler, plan_layout, model, "
        "checkpoint_sha256; each PNG's own chunks add its seed."
    )
    understood: str | None = Field(
        description="The prompt as drawn, in the caption grammar (the plan in words); null "
        "when nothing was understood and the prompt was drawn as given."
    )
    ignored: list[str] = Field(description="Words of the prompt that were not understood.")
    not_learned: list[str] = Field(
        description="Things the prompt names that the served model never learned to draw "
        "(the shapes model knows circle, square and triangle): they are drawn as typed, "
        "and the images will not show them."
    )


@router.post(
    "/generate",
    summary="Generate images from a text prompt (DiT)",
    response_model=GenerateResponse,
    responses={
        200: {"content": {"image/png": {}}, "description": "JSON, or the PNG itself."},
        202: {"description": "with 'Prefer: respond-async': the job started (Location)"},
        **error_responses(400, 401, 409, 413, 422, 429, 503, 504),
    },
    dependencies=[RateLimited],
)
async def generate(
    body: GenerateRequest,
    context: WorkDep,
    accept: Annotated[str | None, Header()] = None,
) -> GenerateResponse | Response:
    served = await context.models.lookup("dit")
    try:
        options = served.defaults.resolve(
            steps=body.steps,
            guidance_scale=body.guidance_scale,
            sampler=body.sampler,
            plan_layout=body.plan_layout,
        )
    except ValueError as exc:
        raise ValidationFailed(str(exc)) from None
    check_generate_cost(options.steps, body.num_images, context.settings)
    webhook = await context.executor.webhook(body.webhook, body.webhook_events)
    seeds = consecutive_seeds(body.seed, body.num_images)
    work = GenerateWork(body.prompt, body.negative_prompt, tuple(seeds), options)
    submission = context.submission(
        [body.model_dump_json(by_alias=True, exclude={"previews"})],
        webhook=webhook,
        previews=body.previews,
    )
    result = await context.executor.submit(work, served, submission)
    if isinstance(result, Accepted):
        return job_accepted(result.job)
    if body.num_images == 1 and accept is not None and "image/png" in accept:
        seed = str(result.fields["seeds"][0])
        return Response(result.images[0], media_type="image/png", headers={"X-Seed": seed})
    return GenerateResponse(
        images=[base64.b64encode(data).decode("ascii") for data in result.images],
        **result.fields,
    )

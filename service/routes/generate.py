"""``POST /v1/generate``: a prompt in, base64 PNGs and their seeds out.

With ``Prefer: respond-async`` the same request starts a job (202, see
``service.routes.jobs``). A client that disconnects cancels its images; a request whose
cost (steps x images) is over ``max_image_steps`` is refused with 422.
"""

from __future__ import annotations

import base64
from dataclasses import asdict
from typing import Annotated, Any, get_args

from fastapi import APIRouter, Depends, Header, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.concurrency import run_in_threadpool

from models.diffusion.random import MAX_SEED, consecutive_seeds
from service.errors import ValidationFailed
from service.images import encode_image
from service.jobs import JobResult, Progress
from service.model_types import TextToImageModel
from service.routes import (
    SettingsDep,
    all_or_nothing,
    error_responses,
    pool_of,
    remaining_seconds,
    unless_disconnected,
)
from service.routes.jobs import RespondAsync, start_job
from service.workers import GenerateJob, WorkerPool

router = APIRouter(prefix="/v1", tags=["generate"])

GeneratePool = Annotated[WorkerPool[TextToImageModel], Depends(pool_of("dit"))]


class GenerateRequest(BaseModel):
    # strict: a JSON value of another type than the schema says (``"5"`` for 5, ``0`` for
    # false) is refused, not coerced (found by the schemathesis fuzz); but see below.
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
    num_images: int = Field(default=1, ge=1, le=8)
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
    parameters: dict = Field(
        description="How the images were made (also in each PNG's text chunks): prompt, "
        "negative_prompt, steps, guidance_scale, sampler, plan_layout, model, "
        "checkpoint_sha256; each PNG's own chunks add its seed."
    )
    understood: str | None = Field(
        description="The prompt as drawn, in the caption grammar (the plan in words); null "
        "when nothing was understood and the prompt was drawn as given."
    )
    ignored: list[str] = Field(description="Words of the prompt that were not understood.")


@router.post(
    "/generate",
    summary="Generate images from a text prompt (DiT)",
    response_model=GenerateResponse,
    responses={
        200: {"content": {"image/png": {}}, "description": "JSON, or the PNG itself."},
        202: {"description": "with 'Prefer: respond-async': the job started (Location)"},
        **error_responses(400, 401, 413, 422, 429, 503, 504),
    },
)
async def generate(
    body: GenerateRequest,
    request: Request,
    settings: SettingsDep,
    pool: GeneratePool,
    respond_async: RespondAsync,
    accept: Annotated[str | None, Header()] = None,
) -> GenerateResponse | Response:
    try:
        options = pool.model.defaults.resolve(
            steps=body.steps,
            guidance_scale=body.guidance_scale,
            sampler=body.sampler,
            plan_layout=body.plan_layout,
        )
    except ValueError as exc:
        raise ValidationFailed(str(exc)) from None
    cost = options.steps * body.num_images
    if cost > settings.max_image_steps:
        raise ValidationFailed(
            f"steps x num_images = {options.steps} x {body.num_images} = {cost} is over this "
            f"server's budget of {settings.max_image_steps} image-steps per request "
            "(max_image_steps); ask for fewer steps or images"
        )
    seeds = consecutive_seeds(body.seed, body.num_images)
    understanding = pool.model.understand(body.prompt)
    jobs = [GenerateJob(body.prompt, body.negative_prompt, seed, options) for seed in seeds]
    parameters = {
        "prompt": body.prompt,
        "negative_prompt": body.negative_prompt,
        "steps": options.steps,
        "guidance_scale": options.guidance_scale,
        "sampler": options.sampler,
        "plan_layout": options.plan_layout,
        "understood": understanding.caption,
        **pool.provenance(),
    }

    async def work(progress: Progress | None, timeout_s: float | None) -> list[bytes]:
        images = await all_or_nothing(
            *(
                pool.submit(
                    job,
                    timeout_s=timeout_s,
                    on_progress=None if progress is None else progress.reporter(i),
                )
                for i, job in enumerate(jobs)
            )
        )
        return await run_in_threadpool(_encode_all, images, seeds, parameters)

    fields = {
        "seeds": seeds,
        **asdict(options),
        "understood": understanding.caption,
        "ignored": list(understanding.ignored),
        "parameters": parameters,
    }
    if respond_async:

        async def job_work(progress: Progress) -> JobResult:
            return JobResult(await work(progress, None), "image/png", fields)

        return start_job(
            request,
            "generate",
            parts=len(jobs),
            unit="sampler step",
            parameters=parameters | {"seeds": seeds},
            work=job_work,
        )
    timeout = remaining_seconds(request, settings)
    pngs = await unless_disconnected(request, work(None, timeout))
    if body.num_images == 1 and accept is not None and "image/png" in accept:
        return Response(pngs[0], media_type="image/png", headers={"X-Seed": str(seeds[0])})
    return GenerateResponse(
        images=[base64.b64encode(data).decode("ascii") for data in pngs], **fields
    )


def _encode_all(images, seeds, parameters) -> list[bytes]:
    return [
        encode_image(image, "png", parameters | {"seed": seed})[0]
        for image, seed in zip(images, seeds, strict=True)
    ]

"""``POST /v1/generate``: a prompt in, base64 PNGs and their seeds out."""

from __future__ import annotations

import asyncio
import base64
import secrets
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.concurrency import run_in_threadpool

from service.auth import require_api_key
from service.errors import ValidationFailed
from service.images import encode_image
from service.routes import SettingsDep, pool_of, remaining_seconds
from service.workers import GenerateJob, WorkerPool

router = APIRouter(prefix="/v1", tags=["generate"], dependencies=[Depends(require_api_key)])

GeneratePool = Annotated[WorkerPool, Depends(pool_of("dit"))]
MAX_SEED = 2**31 - 1


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

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


@router.post(
    "/generate",
    summary="Generate images from a text prompt (DiT)",
    response_model=GenerateResponse,
    responses={
        200: {"content": {"image/png": {}}, "description": "JSON, or the PNG itself."},
        422: {"description": "a field is invalid"},
        429: {"description": "overloaded; see Retry-After"},
        503: {"description": "model not loaded, or shutting down"},
        504: {"description": "past the request deadline"},
    },
)
async def generate(
    body: GenerateRequest,
    request: Request,
    settings: SettingsDep,
    pool: GeneratePool,
    accept: Annotated[str | None, Header()] = None,
) -> GenerateResponse | Response:
    model = pool.model
    sampler = body.sampler or model.samplers[0]
    if sampler not in model.samplers:
        raise ValidationFailed(f"sampler: {sampler!r} is not one of {list(model.samplers)}")
    steps = body.steps or model.default_steps
    guidance = (
        body.guidance_scale if body.guidance_scale is not None else model.default_guidance_scale
    )
    plan_layout = body.plan_layout if body.plan_layout is not None else model.default_plan_layout
    first_seed = body.seed if body.seed is not None else secrets.randbelow(MAX_SEED - 8)
    seeds = [(first_seed + i) % (MAX_SEED + 1) for i in range(body.num_images)]
    timeout = remaining_seconds(request, settings)
    jobs = [
        GenerateJob(
            body.prompt, body.negative_prompt, steps, float(guidance), seed, sampler, plan_layout
        )
        for seed in seeds
    ]
    images = await asyncio.gather(*(pool.submit(job, timeout_s=timeout) for job in jobs))
    pngs = [data for data, _ in await run_in_threadpool(_encode_all, images)]
    if body.num_images == 1 and accept is not None and "image/png" in accept:
        return Response(pngs[0], media_type="image/png", headers={"X-Seed": str(seeds[0])})
    return GenerateResponse(
        images=[base64.b64encode(data).decode("ascii") for data in pngs],
        seeds=seeds,
        steps=steps,
        guidance_scale=float(guidance),
        sampler=sampler,
        plan_layout=plan_layout,
    )


def _encode_all(images):
    return [encode_image(image, "png") for image in images]

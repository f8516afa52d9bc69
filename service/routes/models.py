"""``GET /v1/models``: what is loaded, on which devices, from which weights.

Host filesystem paths never leave the service: a weight file is named by its path
inside the weights folder it was found in (or its file name) and identified by its
SHA-256 (``details.sha256``); any other absolute path in a detail or an error message
is cut to its last component.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from models.adain.presets import BASE_SIDE
from service.errors import error_responses
from service.routes.deps import CatalogDep, LocalModelsDep, SettingsDep
from service.routes.generate import MAX_NUM_IMAGES
from service.routes.stylize import MAX_MASK_SIZE

router = APIRouter(prefix="/v1", tags=["models"])

#: An absolute POSIX path inside free text: a slash-led run of path characters.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])/[\w.~+@%=-]+(?:/[\w.~+@%=-]+)*/?")


@router.get(
    "/models",
    summary="Models requested at startup and their state",
    responses=error_responses(401, 503),
)
async def list_models(
    local: LocalModelsDep, catalog: CatalogDep, settings: SettingsDep
) -> dict[str, Any]:
    """Each model requested here (``where: "here"``), then each model served (or once
    served) by workers elsewhere on the job store (``where: "workers"``)."""
    statuses = [status.as_dict() | {"where": "here"} for status in local.statuses.values()]
    remote = await catalog.remote()
    for name, (details, live) in sorted(remote.items()):
        if name in local.pools:
            continue
        statuses.append(
            {
                "name": name,
                "loaded": live,
                "devices": [],
                "details": details,
                "error": None if live else "no worker serves it now",
                "where": "workers",
            }
        )
    folders = settings.weight_search_path()
    public = await run_in_threadpool(lambda: [public_status(s, folders) for s in statuses])
    return {"models": public}


class StylizeLimits(BaseModel):
    """What a stylize request may ask of this server (what a client shows before sending)."""

    max_side: int = Field(description="Largest output side (size).")
    print_size_above: int = Field(
        description="Sides above this are painted at full resolution by print-size tiles."
    )
    max_pixel_passes: int = Field(description="Cost budget of a request answered at once.")
    max_job_pixel_passes: int = Field(description="Cost budget of a job (Prefer: respond-async).")
    max_upload_bytes: int = Field(description="Largest upload body.")
    max_mask_size: int = Field(
        description="Largest size (output side) a request with masks may ask for."
    )


class GenerateLimits(BaseModel):
    """What a generate request may ask of this server."""

    max_image_steps: int = Field(
        description="Sampler steps x images of one request, at most (its cost)."
    )
    max_images: int = Field(description="Images of one request (num_images), at most.")


class VideoLimits(BaseModel):
    """What a video sent to stylize may be (it always runs as a job)."""

    max_side: int = Field(description="Largest side of the stylised frames.")
    max_seconds: float = Field(description="Longest clip.")
    max_frames: int = Field(description="Most frames.")
    max_fps: float = Field(description="Highest frame rate.")
    max_pixels: int = Field(description="Frames x height x width, at most.")


class Limits(BaseModel):
    stylize: StylizeLimits
    video: VideoLimits
    generate: GenerateLimits


@router.get(
    "/limits",
    summary="This server's limits for a request (sizes, budgets, uploads)",
    response_model=Limits,
    responses=error_responses(401),
)
async def limits(settings: SettingsDep) -> Limits:
    """The settings that decide whether a request is refused, so that a client (the page)
    offers what the server takes; the cost bound itself is in docs/service.md."""
    return Limits(
        stylize=StylizeLimits(
            max_side=settings.max_side,
            print_size_above=BASE_SIDE,
            max_pixel_passes=settings.max_stylize_pixel_passes,
            max_job_pixel_passes=settings.max_job_stylize_pixel_passes,
            max_upload_bytes=settings.max_stylize_upload_bytes,
            max_mask_size=min(MAX_MASK_SIZE, settings.max_side),
        ),
        video=VideoLimits(
            max_side=settings.max_video_side,
            max_seconds=settings.max_video_seconds,
            max_frames=settings.max_video_frames,
            max_fps=settings.max_video_fps,
            max_pixels=settings.max_video_pixels,
        ),
        generate=GenerateLimits(
            max_image_steps=settings.max_image_steps, max_images=MAX_NUM_IMAGES
        ),
    )


def public_status(status: dict[str, Any], folders: Sequence[Path]) -> dict[str, Any]:
    """``status`` without host paths; weight files named and hashed (see the module doc)."""
    hashes: dict[str, str] = {}

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [clean(item) for item in value]
        if isinstance(value, str) and value.startswith("/") and "\n" not in value:
            name = _public_name(Path(value), folders)
            digest = _sha256(value)
            if digest is not None:
                hashes[name] = digest
            return name
        if isinstance(value, str):
            return _ABSOLUTE_PATH.sub(lambda match: Path(match.group()).name or "/", value)
        return value

    public: dict[str, Any] = clean(status)
    if hashes:
        public.setdefault("details", {})["sha256"] = hashes
    return public


def _public_name(path: Path, folders: Sequence[Path]) -> str:
    for folder in folders:
        for base in (folder, folder.resolve()):
            if path.is_relative_to(base):
                return path.relative_to(base).as_posix()
    return path.name


@lru_cache(maxsize=64)
def _sha256(path: str) -> str | None:
    """The file's SHA-256, or ``None`` when it is not a readable file (cached: weight
    files do not change while the service runs)."""
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None

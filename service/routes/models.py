"""``GET /v1/models``: what is loaded, on which devices, from which weights."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from service.auth import require_api_key
from service.routes import error_responses

router = APIRouter(prefix="/v1", tags=["models"], dependencies=[Depends(require_api_key)])


@router.get(
    "/models",
    summary="Models requested at startup and their state",
    responses=error_responses(401, 503),
)
async def list_models(request: Request) -> dict:
    statuses = request.app.state.model_status.values()
    return {"models": [status.as_dict() for status in statuses]}

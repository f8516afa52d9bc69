"""Probes and metrics: ``/healthz`` (alive), ``/readyz`` (models loaded), ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from service.errors import error_body
from service.routes import ErrorBody

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: at least one model loaded and not shutting down",
    responses={503: {"model": ErrorBody, "description": "not ready (nothing loaded, or draining)"}},
)
async def readyz(request: Request) -> JSONResponse:
    statuses = request.app.state.model_status
    models = {name: ("loaded" if s.loaded else s.error) for name, s in statuses.items()}
    if request.app.state.lifecycle.leaving:
        body = error_body("shutting_down", "the service is shutting down")
        return JSONResponse({**body, "models": models}, status_code=503)
    if not request.app.state.pools:
        body = error_body("not_ready", "no model is loaded")
        return JSONResponse({**body, "models": models}, status_code=503)
    return JSONResponse({"status": "ready", "models": models})


# Probes answer HEAD as well (same status, no body); kept out of the schema, where a
# second method on one function would repeat its operation id.
for _path, _probe in (("/healthz", healthz), ("/readyz", readyz)):
    router.add_api_route(_path, _probe, methods=["HEAD"], include_in_schema=False)


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(request: Request) -> Response:
    registry = request.app.state.metrics
    return Response(registry.render(), media_type=registry.content_type)

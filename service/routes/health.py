"""Probes and metrics: ``/healthz`` (alive), ``/readyz`` (models loaded), ``/metrics``."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from service.errors import ErrorBody, NotReady, ShuttingDown, StoreUnavailable
from service.routes.deps import DrainDep, LocalModelsDep, MetricsDep, OpenStoreDep

#: The most /readyz waits for the job store (a probe's own timeout is often 1 s).
READY_STORE_BUDGET_S = 0.5

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: the job store answers, a model is served here or by a worker, "
    "and the replica is not shutting down",
    responses={
        503: {
            "model": ErrorBody,
            "description": "not ready (draining, the job store unreachable, no model)",
        }
    },
)
async def readyz(local: LocalModelsDep, drain: DrainDep, store: OpenStoreDep) -> JSONResponse:
    models = {name: ("loaded" if s.loaded else s.error) for name, s in local.statuses.items()}
    if drain.leaving:
        return ShuttingDown("the service is shutting down").response(models=models)
    if store is None:  # the lifespan has not opened it (yet)
        return NotReady("starting: the job store is not open").response(models=models)
    try:
        async with asyncio.timeout(READY_STORE_BUDGET_S):
            remote = await store.models()
    except TimeoutError:
        down = StoreUnavailable(f"the job store did not answer within {READY_STORE_BUDGET_S} s")
        return down.response(models=models, dependencies={"store": f"unavailable: {down.message}"})
    except StoreUnavailable as exc:
        return exc.response(models=models, dependencies={"store": f"unavailable: {exc.message}"})
    for name, (_, live) in remote.items():
        if name not in local.pools:
            models[name] = "served by workers" if live else "no worker serves it now"
    if not local.pools and not remote:
        refusal = NotReady("no model is loaded here or served by a worker")
        return refusal.response(models=models)
    return JSONResponse({"status": "ready", "models": models, "dependencies": {"store": "ok"}})


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
async def metrics(registry: MetricsDep, store: OpenStoreDep) -> Response:
    if store is not None:
        try:
            for model, queued in (await store.queue_depths()).items():
                registry.jobs_queued.labels(model).set(queued)
        except StoreUnavailable:
            pass
    return Response(registry.render(), media_type=registry.content_type)

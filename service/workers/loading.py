"""Loading the requested models on every device, their status, and their pools."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.batching import DeviceGate
from service.config import Settings
from service.metrics import Metrics
from service.model_types import ServedModel
from service.workers.pool import AnyWorkerPool, WorkerPool
from service.workers.registry import AnyModelEntry

logger = logging.getLogger("atelier.workers")


@dataclass
class ModelStatus:
    """What ``/v1/models`` and ``/readyz`` report for one requested model."""

    name: str
    loaded: bool
    devices: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "loaded": self.loaded,
            "devices": self.devices,
            "details": self.details,
            "error": self.error,
        }


def requested_models(settings: Settings) -> list[str]:
    return [name.strip() for name in settings.load_models.split(",") if name.strip()]


def load_models(
    settings: Settings, entries: Mapping[str, AnyModelEntry]
) -> tuple[dict[str, dict[str, ServedModel]], dict[str, ModelStatus]]:
    """Load every requested model on every device and warm it up (one small request, so
    that lazy initialisation, a CUDA context, cuDNN's choices and the allocator's pools,
    is not paid by the first client); blocking: call it off the loop.

    A model that fails to load (missing weights, module not built) is logged and
    reported as not loaded; the others still serve.

    Returns:
        ``({name: {device: model}}, {name: status})``.
    """
    devices = settings.device_list()
    loaded: dict[str, dict[str, ServedModel]] = {}
    statuses: dict[str, ModelStatus] = {}
    for name in requested_models(settings):
        entry = entries.get(name)
        if entry is None:
            error = f"unknown model {name!r}; known: {sorted(entries)}"
            logger.error("model not loaded", extra={"model": name, "error": error})
            statuses[name] = ModelStatus(name, loaded=False, error=error)
            continue
        try:
            per_device: dict[str, ServedModel] = {
                device: entry.load(settings.weight_search_path(), device) for device in devices
            }
        except Exception as exc:  # a missing model must not take the service down
            error = f"{type(exc).__name__}: {exc}"
            logger.warning("model not loaded", extra={"model": name, "error": error})
            statuses[name] = ModelStatus(name, loaded=False, error=error)
            continue
        warm_up_s = sum(model.warm_up() for model in per_device.values())
        first = next(iter(per_device.values()))
        details = entry.details(first)
        details["checkpoint_sha256"] = checkpoint_hashes(details)
        loaded[name] = per_device
        statuses[name] = ModelStatus(name, loaded=True, devices=devices, details=details)
        logger.info(
            "model loaded and warmed up",
            extra={"model": name, "devices": devices, "warm_up_s": round(warm_up_s, 3)},
        )
    return loaded, statuses


def checkpoint_hashes(details: Mapping[str, Any]) -> dict[str, str]:
    """sha256 of each weight file a model reports (``source`` or ``weight_files``), by
    file name: what generated images record as their provenance."""
    from models.hub import sha256_of

    paths = [details["source"]] if details.get("source") else []
    paths += list(details.get("weight_files") or [])
    return {Path(p).name: sha256_of(p) for p in paths if Path(p).is_file()}


def build_pools(
    loaded: Mapping[str, Mapping[str, ServedModel]],
    entries: Mapping[str, AnyModelEntry],
    settings: Settings,
    metrics: Metrics,
    statuses: Mapping[str, ModelStatus] | None = None,
) -> dict[str, AnyWorkerPool]:
    """One pool per loaded model; pools on the same device share its ``DeviceGate``."""
    gates: dict[str, DeviceGate] = {}
    pools: dict[str, AnyWorkerPool] = {}
    for name, models in loaded.items():
        for device in models:
            gates.setdefault(device, DeviceGate())
        pool = WorkerPool(name, models, entries[name].run, settings, metrics, gates)
        status = (statuses or {}).get(name)
        if status is not None:
            pool.details = dict(status.details)
        pools[name] = pool
    return pools

"""Which models a replica can take requests for, and what it knows of them.

A model is served in one of three ways, as the catalog reports in a :class:`Served`:

* **local**: this process loaded it; synchronous requests run on its worker pool at
  once, and this process's job runner also takes the model's jobs from the store;
* **remote**: a live worker on the shared job store serves it (``atelier worker``, or
  another replica); requests become jobs on the queue, synchronous ones are waited for;
* **known, not served now**: a worker served it before and none does now (the
  workers were scaled to zero, or are restarting); async jobs are accepted and wait in
  the queue, synchronous requests get 503.

What a replica that does not load a model still needs to validate requests for it (the
DiT's defaults and image size, AdaIN's work per preset) comes from the details each worker
publishes to the store (``ModelEntry.details``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from models.dit.options import GenerateDefaults
from service.errors import NotReady
from service.jobs.store import JobStore, StoreUnavailable
from service.workers.loading import ModelStatus
from service.workers.pool import AnyWorkerPool


@dataclass(frozen=True)
class Served:
    """How one model is served from here (see the module docstring)."""

    name: str
    details: dict[str, Any]
    pool: AnyWorkerPool | None
    live: bool

    @property
    def defaults(self) -> GenerateDefaults:
        """The text-to-image model's defaults and limits."""
        raw = dict(self.details["defaults"])
        raw["samplers"] = tuple(raw["samplers"])
        return GenerateDefaults(**raw)

    @property
    def image_size(self) -> int:
        return int(self.details["image_size"])

    def full_size_passes(self, preset: str) -> float:
        """The style-transfer model's work for one image with ``preset``, in full-size
        passes (``StyleTransferModel.full_size_passes``)."""
        return float(self.details["full_size_passes"][preset])

    def model_parameters(self) -> dict[str, Any]:
        """The model's own settings that shape a result (e.g. AdaIN's levels)."""
        return {
            key: self.details[key] for key in ("levels", "mode", "dtype") if key in self.details
        }


class ModelCatalog:
    """The models of this replica's pools and of the workers on its job store.

    Args:
        pools: this process's pools by model name.
        statuses: this process's load results (why a model is not loaded here).
        store: the job store, where remote workers publish their models.
        cache_s: how long what the store said is reused.
    """

    def __init__(
        self,
        pools: Mapping[str, AnyWorkerPool],
        statuses: Mapping[str, ModelStatus],
        store: JobStore,
        *,
        cache_s: float = 1.0,
    ) -> None:
        self.pools = dict(pools)
        self.statuses = dict(statuses)
        self.store = store
        self.cache_s = cache_s
        self._remote: dict[str, tuple[dict[str, Any], bool]] = {}
        self._read_at = -float("inf")

    async def remote(self) -> dict[str, tuple[dict[str, Any], bool]]:
        """``{name: (details, served now)}`` as the job store says (cached briefly)."""
        if time.monotonic() - self._read_at >= self.cache_s:
            try:
                self._remote = await self.store.models()
            except StoreUnavailable:
                self._remote = {}
            self._read_at = time.monotonic()
        return self._remote

    async def lookup(self, name: str) -> Served:
        """How ``name`` is served from here.

        Raises:
            NotReady: no worker has ever served it (503 ``model_not_loaded``).
        """
        pool = self.pools.get(name)
        if pool is not None:
            return Served(name, pool.details, pool, True)
        remote = (await self.remote()).get(name)
        if remote is not None:
            details, live = remote
            return Served(name, details, None, live)
        status = self.statuses.get(name)
        reason = status.error if status is not None and status.error else "not requested"
        raise NotReady(f"model {name!r} is not loaded ({reason})", code="model_not_loaded")

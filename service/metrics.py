"""Prometheus metrics (prometheus-client), one registry per app so tests stay isolated.

Exported series:

* ``atelier_http_requests_total{method, route, status, key}`` (``key``: the API key's
  name, from the keys file, so its values are bounded; empty when none was checked) and
  ``atelier_http_request_duration_seconds{method, route}``: every request, labelled by
  the route template (``/v1/stylize``), never the raw path, to bound cardinality.
* ``atelier_http_requests_in_flight``.
* ``atelier_batch_size{model, device}`` and ``atelier_forward_duration_seconds{model,
  device}``: one observation per batched forward.
* ``atelier_queue_depth{model, device, priority}``: items waiting in each batcher
  (``interactive``: requests a client waits for; ``background``: async jobs; ``bulk``:
  print steps).
* ``atelier_jobs_queued{model}``: jobs waiting in the job store for a worker (read from
  the store at each scrape: the figure workers scale on).
* ``atelier_jobs_total{model, outcome}``: jobs a worker of this process ended
  (``succeeded``, ``failed``, ``cancelled``, ``handed_back``, ``lost``).
* ``atelier_work_units_total{model, device}``: item-steps started (sampler steps x
  images for the DiT, passes x images for AdaIN): what the workers spent, so a benchmark
  can show that nothing is computed for abandoned requests after their cancel point.
* ``atelier_cancelled_total{model, device, reason, stage}``: items nobody waited for any
  more (``reason`` ``caller_gone`` or ``deadline``), dropped while ``queued`` or
  ``running`` (at a step boundary).
"""

from __future__ import annotations

from functools import partial

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """The service's metric families on a private ``CollectorRegistry``."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # every family on this app's own registry; a batcher's are labelled by its model
        # and device (``BatchMetrics``)
        counter = partial(Counter, registry=self.registry)
        gauge = partial(Gauge, registry=self.registry)
        histogram = partial(Histogram, registry=self.registry)
        batcher = ("model", "device")
        self.requests = counter(
            "atelier_http_requests", "HTTP requests answered.", ("method", "route", "status", "key")
        )
        self.latency = histogram(
            "atelier_http_request_duration_seconds",
            "Time from the request's arrival to the end of its response.",
            ("method", "route"),
            buckets=_LATENCY_BUCKETS,
        )
        self.in_flight = gauge("atelier_http_requests_in_flight", "Requests being served.")
        self.batch_size = histogram(
            "atelier_batch_size", "Items per batched forward.", batcher, buckets=_BATCH_BUCKETS
        )
        self.forward_seconds = histogram(
            "atelier_forward_duration_seconds",
            "Wall time of one batched forward.",
            batcher,
            buckets=_LATENCY_BUCKETS,
        )
        self.queue_depth = gauge(
            "atelier_queue_depth", "Items waiting in a batcher's queue.", (*batcher, "priority")
        )
        self.jobs_queued = gauge(
            "atelier_jobs_queued", "Jobs waiting in the job store for a worker.", ("model",)
        )
        self.jobs = counter(
            "atelier_jobs",
            "Jobs a worker of this process ended, by outcome.",
            ("model", "outcome"),
        )

        self.work_units = counter(
            "atelier_work_units",
            "Item-steps started by the workers (sampler steps or passes, times images).",
            batcher,
        )
        self.cancelled = counter(
            "atelier_cancelled",
            "Items dropped because nobody waited for them any more.",
            (*batcher, "reason", "stage"),
        )

    def observe_request(
        self, method: str, route: str, status: int, seconds: float, key: str = ""
    ) -> None:
        self.requests.labels(method, route, str(status), key).inc()
        self.latency.labels(method, route).observe(seconds)

    def batch_observer(self, model: str, device: str, priority: str) -> BatchMetrics:
        return BatchMetrics(self, model, device, priority)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class BatchMetrics:
    """The ``service.batching.BatchObserver`` for one model on one device."""

    def __init__(self, metrics: Metrics, model: str, device: str, priority: str) -> None:
        self._depth = metrics.queue_depth.labels(model, device, priority)
        self._size = metrics.batch_size.labels(model, device)
        self._seconds = metrics.forward_seconds.labels(model, device)
        self._work = metrics.work_units.labels(model, device)
        self._cancelled = metrics.cancelled
        self._labels = (model, device)
        self._depth.set(0)
        self._work.inc(0)

    def queue_depth(self, depth: int) -> None:
        self._depth.set(depth)

    def batch_done(self, size: int, seconds: float) -> None:
        self._size.observe(size)
        self._seconds.observe(seconds)

    def work_done(self, rows: int) -> None:
        self._work.inc(rows)

    def cancelled(self, reason: str, stage: str) -> None:
        self._cancelled.labels(*self._labels, reason, stage).inc()

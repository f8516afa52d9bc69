"""Worker pools: a model's batchers on every device, requests to the least loaded.

Each pool has one batcher per priority and device (``service.priorities``): interactive
work (a client waiting on its connection), background work (async jobs) and bulk work
(a print's steps). All share the device's ``DeviceGate`` with every other pool on that
device, ranked in that order, so a batch yields the device at its step boundaries while
more urgent work runs (``service.batching``), and between two layers of its networks
inside a step (the control's pause hook at the models' pause points,
``models.control.pausing``): a long pass holds the device for one layer at a time.

This module is where torch meets the generic batcher: out-of-memory errors split
batches, and the batcher's errors become API errors. Each model's entry point
(``stylize``, ``sample``) sets inference mode itself.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any, Generic, TypeAlias, TypeVar

import torch

from models.control import StepControl, pause_hook, pausing
from service.batching import (
    DEADLINE,
    Batcher,
    Closed,
    DeviceGate,
    Expired,
    PreviewCallback,
    ProgressCallback,
    QueueFull,
)
from service.config import Settings
from service.errors import DeadlineExceeded, Overloaded, RejectedByModel, ShuttingDown
from service.metrics import Metrics
from service.model_types import BatchJob
from service.priorities import INTERACTIVE, PRIORITIES, rank

ModelT = TypeVar("ModelT")
JobT = TypeVar("JobT", bound=BatchJob)
T = TypeVar("T")
ItemT = TypeVar("ItemT")

#: One batched forward, ``run(model, jobs, control)``: one ``(3, H, W)`` result per job
#: that ``control`` kept (the ``models.control.StepControl`` contract).
RunBatch: TypeAlias = Callable[[ModelT, list[JobT], StepControl], list[torch.Tensor]]


def is_out_of_memory(exc: BaseException) -> bool:
    """True for CUDA (or other accelerator) out-of-memory errors."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def release_memory() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _job_cost(job: BatchJob) -> float:
    return job.cost()


def _pausing_between_layers(
    run: RunBatch[ModelT, JobT], model: ModelT, jobs: list[JobT], control: StepControl
) -> list[torch.Tensor]:
    """``run(model, jobs, control)`` whose networks' pause points call the control's
    pause hook (a forward of a less urgent batcher: it yields the device there too)."""
    with pausing(pause_hook(control)):
        return run(model, jobs, control)


class WorkerPool(Generic[ModelT, JobT]):
    """The batchers of one model: per device, one for each priority (interactive,
    background and bulk work); ``submit`` picks the least loaded device.

    Args:
        gates: one ``DeviceGate`` per device, shared by every pool on that device (a
            fresh one per device when not given).
    """

    def __init__(
        self,
        name: str,
        models: Mapping[str, ModelT],
        run: RunBatch[ModelT, JobT],
        settings: Settings,
        metrics: Metrics,
        gates: Mapping[str, DeviceGate] | None = None,
    ) -> None:
        if not models:
            raise ValueError(f"{name}: a pool needs at least one device")
        self.name = name
        self.models = dict(models)
        #: the model's details (``ModelEntry.details``), filled by ``build_pools``
        self.details: dict[str, Any] = {}
        gates = gates or {device: DeviceGate() for device in self.models}
        self.batchers: dict[str, dict[str, Batcher[JobT, torch.Tensor]]] = {
            device: {
                priority: Batcher(
                    partial(_pausing_between_layers, run, model),
                    max_batch_size=settings.max_batch_size,
                    max_wait_s=settings.max_batch_wait_ms / 1000.0,
                    queue_size=settings.queue_size,
                    observer=metrics.batch_observer(name, device, priority),
                    name=f"{name}-{device}-{priority}",
                    is_out_of_memory=is_out_of_memory,
                    release_memory=release_memory,
                    cost=_job_cost,
                    max_batch_cost=settings.max_batch_pixels,
                    gate=gates[device],
                    rank=rank(priority),
                )
                for priority in PRIORITIES
            }
            for device, model in self.models.items()
        }

    @property
    def model(self) -> ModelT:
        """The model on the first device (for what is the same on all: its defaults)."""
        return next(iter(self.models.values()))

    def model_parameters(self) -> dict[str, Any]:
        """The model's own settings that shape a result (e.g. AdaIN's levels)."""
        return {
            key: self.details[key] for key in ("levels", "mode", "dtype") if key in self.details
        }

    def provenance(self) -> dict[str, Any]:
        """Which model and weights made a result (goes into PNG text chunks and JSON)."""
        return {"model": self.name, "checkpoint_sha256": self.details.get("checkpoint_sha256", {})}

    @property
    def devices(self) -> list[str]:
        return list(self.batchers)

    def _all(self) -> list[Batcher[JobT, torch.Tensor]]:
        return [b for per_device in self.batchers.values() for b in per_device.values()]

    def start(self) -> None:
        for batcher in self._all():
            batcher.start()

    async def close(self) -> None:
        await asyncio.gather(*(batcher.close() for batcher in self._all()))

    async def submit(
        self,
        job: JobT,
        *,
        priority: str = INTERACTIVE,
        timeout_s: float | None = None,
        on_progress: ProgressCallback | None = None,
        owner: str = "",
        on_preview: PreviewCallback | None = None,
    ) -> torch.Tensor:
        """Run ``job`` on the least-loaded device and return its result.

        ``on_progress(done, total)`` hears of each step (from the worker thread);
        ``on_preview(done, total, picture)`` sees the job's picture as it forms, when the
        model shows it (``models.control.ShowImages``; ``picture()``: ``(3, h, w)`` in
        ``[0, 1]``); without it the model is not shown anything.
        Cancelling the awaiting task stops the job: dropped from the queue, or from its
        running batch at the next step. ``owner`` is whose work it is (fair share).

        Batcher and model errors become API errors: a full queue or an out-of-memory on a
        single item is a 429 with ``Retry-After``, a closed batcher a 503, a missed
        deadline a 504, a ``ValueError`` (input the model refused) a 400.
        """
        device = min(self.batchers, key=lambda d: sum(b.load for b in self.batchers[d].values()))
        batcher = self.batchers[device][priority]
        try:
            return await batcher.submit(
                job,
                key=job.batch_key(),
                timeout_s=timeout_s,
                on_progress=on_progress,
                owner=owner,
                on_preview=on_preview,
            )
        except QueueFull as exc:
            raise Overloaded(str(exc), retry_after_s=exc.retry_after_s) from exc
        except Closed as exc:
            raise ShuttingDown("the service is shutting down") from exc
        except Expired as exc:
            raise DeadlineExceeded(str(exc)) from exc
        except ValueError as exc:
            raise RejectedByModel(f"{self.name}: {exc}") from exc
        except RuntimeError as exc:
            if is_out_of_memory(exc):
                raise Overloaded(f"{self.name}: out of memory, retry later") from exc
            raise


async def all_or_nothing(*submissions: Awaitable[T]) -> list[T]:
    """Await every submission (e.g. one :meth:`WorkerPool.submit` per image of a
    request); the first failure cancels the others and is raised (so one image past
    its deadline stops its siblings too, which the batcher counts as a deadline)."""
    tasks = [asyncio.ensure_future(submission) for submission in submissions]
    try:
        return list(await asyncio.gather(*tasks))
    except DeadlineExceeded:
        for task in tasks:
            task.cancel(DEADLINE)
        raise
    finally:
        for task in tasks:
            task.cancel()


async def in_order(
    submit: Callable[[ItemT], Awaitable[T]], items: Iterable[ItemT], window: int
) -> AsyncGenerator[tuple[ItemT, T], None]:
    """``(item, result)`` of each item's submission, in the items' order, with ``window``
    submissions in flight: the next is submitted as soon as the oldest's result comes, so
    a device has the next item queued while its caller takes a result in. The first
    failure cancels the rest (a deadline as a deadline, as :func:`all_or_nothing`) and is
    raised; so does leaving early (use it under ``contextlib.aclosing``)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    waiting = iter(items)
    pending: deque[tuple[ItemT, asyncio.Future[T]]] = deque()

    def send(count: int) -> None:
        for item in itertools.islice(waiting, count):
            pending.append((item, asyncio.ensure_future(submit(item))))

    send(window)
    try:
        while pending:
            item, task = pending.popleft()
            try:
                result = await task
            except DeadlineExceeded:
                for _, other in pending:
                    other.cancel(DEADLINE)
                raise
            send(1)
            yield item, result
    finally:
        for _, task in pending:
            task.cancel()


#: A pool of some model kind. Pools are kept by model name (the settings name the
#: models), so which kind a name holds is known at run time only: code that needs the
#: kind (e.g. ``GenerateWork.run``) states it in its own signature.
AnyWorkerPool: TypeAlias = WorkerPool[Any, Any]

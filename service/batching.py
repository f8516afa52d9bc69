"""A generic dynamic batcher: many concurrent callers, one batched forward at a time.

Callers ``await batcher.submit(item, key=..., timeout_s=...)``; one background task
groups queued items by ``key`` (only items with equal keys are compatible, e.g. same
image size and options) and calls ``forward(items) -> results`` on a worker thread, so
the event loop keeps serving while the model runs.

Flush policy, for each key group:

* full: ``len(group) >= max_batch_size`` flushes at once;
* waited: the group's oldest item has waited ``max_wait_s``;
* closing: everything left is flushed so accepted requests finish.

When several groups are ready, the one whose oldest item arrived first goes first.

Failure policy:

* ``forward`` raising (or returning a list of the wrong length) on a batch of n > 1 is
  retried item by item, so one poisoned request fails alone and the others succeed; a
  failure on a single item goes to that caller only.
* An out-of-memory error on a batch (``is_out_of_memory`` says which errors are; the
  caller passes the test in, and ``release_memory`` to run before the retry) splits it
  in halves and retries each half.
* An item past its deadline is dropped before any forward and its caller gets
  ``DeadlineExceeded``; a caller that stops waiting is removed from the queue.
* Inside a forward, work nobody waits for stops: ``forward(items, control)`` gets a
  :class:`BatchControl`, a step control (``models.control.StepControl``) that the model
  asks between its steps; it drops the rows whose caller stopped waiting or whose
  deadline passed, so their work stops within one step while the others go on. The
  same calls report each item's progress to its ``on_progress`` callback.
* ``queue_size`` bounds the items waiting (not yet in a forward); past it ``submit``
  raises ``QueueFull`` with a retry-after estimate.

The module knows nothing of torch or HTTP: its errors are its own, and the worker layer
maps them to API errors and wraps ``forward`` in the framework's inference mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


class BatcherError(Exception):
    """Base of the batcher's own errors (the worker layer maps them to API errors)."""


class QueueFull(BatcherError):
    """``queue_size`` items wait already; ``retry_after_s`` estimates when one leaves."""

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Closed(BatcherError):
    """``close()`` was called: no new items."""


class DeadlineExceeded(BatcherError):
    """The item had no result before its deadline (it was dropped, or stopped waiting)."""


class BatchObserver(Protocol):
    """Receives the batcher's figures (the metrics module implements it)."""

    def queue_depth(self, depth: int) -> None: ...

    def batch_done(self, size: int, seconds: float) -> None: ...

    def work_done(self, rows: int) -> None:
        """``rows`` items start one step of a forward (one unit of work each)."""
        ...

    def cancelled(self, reason: str, stage: str) -> None:
        """An item nobody waits for was dropped: ``reason`` is ``"caller_gone"`` or
        ``"deadline"``, ``stage`` is ``"queued"`` or ``"running"``."""
        ...


class _NullObserver:
    def queue_depth(self, depth: int) -> None:
        pass

    def batch_done(self, size: int, seconds: float) -> None:
        pass

    def work_done(self, rows: int) -> None:
        pass

    def cancelled(self, reason: str, stage: str) -> None:
        pass


ProgressCallback = Callable[[int, int], None]


@dataclass(eq=False)
class _Pending:
    item: Any
    key: Hashable
    future: asyncio.Future
    enqueued_at: float
    deadline: float = math.inf
    on_progress: ProgressCallback | None = None
    #: why the caller stopped waiting; set on the event loop, read by the worker thread
    abandoned: str | None = None

    def unwanted(self, now: float) -> str | None:
        """Why nobody waits for this item any more (``None``: somebody does)."""
        if self.abandoned is not None:
            return self.abandoned
        if now >= self.deadline:
            return "deadline"
        return None


class BatchControl:
    """What a forward asks between its steps: which of its items are still wanted.

    Called as ``control(done, total)`` (the ``models.control.StepControl`` contract)
    before step ``done`` of ``total`` and once with ``done == total`` at the end. It
    reports the progress of every item still computed, counts one unit of work per item
    per step started, and answers the positions (in the batch as it is now) of the items
    still wanted, or ``None`` when all are.

    ``rows`` is then the items (by their index in the forward's list) still in the
    batch, in batch order: a forward returns one result for each of them.
    """

    def __init__(
        self, pending: Sequence[_Pending], clock: Callable[[], float], observer: BatchObserver
    ) -> None:
        self._pending = list(pending)
        self._clock = clock
        self._observer = observer
        self.rows: list[int] = list(range(len(self._pending)))

    def __call__(self, done: int, total: int) -> list[int] | None:
        now = self._clock()
        keep = []
        for position, row in enumerate(self.rows):
            reason = self._pending[row].unwanted(now)
            if reason is None:
                keep.append(position)
            else:
                self._observer.cancelled(reason, "running")
        dropped = len(keep) != len(self.rows)
        if dropped:
            self.rows = [self.rows[position] for position in keep]
        for row in self.rows:
            callback = self._pending[row].on_progress
            if callback is not None:
                callback(done, total)
        if done < total:
            self._observer.work_done(len(self.rows))
        return keep if dropped else None


@dataclass
class BatcherStats:
    """Running totals (batch sizes go to the observer, which keeps a histogram)."""

    forwards: int = 0
    items: int = 0


def _never(exc: BaseException) -> bool:
    return False


class Batcher(Generic[ItemT, ResultT]):
    """Dynamic batching in front of one ``forward`` (one model on one device).

    Args:
        forward: ``(items, control) -> results``, one result per item still in
            ``control.rows`` (all items when the forward never asks ``control``), in
            order. Runs on a single worker thread.
        max_batch_size: most items in one forward.
        max_wait_s: longest an item waits for companions before its group flushes.
        queue_size: most items waiting; one more raises ``QueueFull``.
        clock: monotonic seconds; injectable so deadline tests need no sleeping.
        observer: gets queue depths and batch sizes (metrics).
        name: thread-name prefix, for logs and profilers.
        is_out_of_memory: whether an error from ``forward`` is an out-of-memory, which
            splits the batch in halves instead of retrying item by item.
        release_memory: called before the halves are retried (e.g. emptying a cache).
    """

    def __init__(
        self,
        forward: Callable[[list[ItemT], BatchControl], Sequence[ResultT]],
        *,
        max_batch_size: int,
        max_wait_s: float,
        queue_size: int,
        clock: Callable[[], float] = time.monotonic,
        observer: BatchObserver | None = None,
        name: str = "batcher",
        is_out_of_memory: Callable[[BaseException], bool] = _never,
        release_memory: Callable[[], None] | None = None,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be >= 0, got {max_wait_s}")
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size}")
        self._forward = forward
        self._is_out_of_memory = is_out_of_memory
        self._release_memory = release_memory
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.queue_size = queue_size
        self._clock = clock
        self._observer = observer or _NullObserver()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._groups: dict[Hashable, deque[_Pending]] = {}
        self._queued = 0
        self._in_flight = 0
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False
        self._seconds_per_forward = 0.0
        self.stats = BatcherStats()

    # ------------------------------------------------------------------ public
    @property
    def load(self) -> int:
        """Items queued plus items inside the running forward (for least-loaded routing)."""
        return self._queued + self._in_flight

    @property
    def queued(self) -> int:
        return self._queued

    def start(self) -> None:
        """Start the batching task on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        """Refuse new items, finish every accepted one, then stop the worker thread."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
        self._executor.shutdown(wait=True)

    async def submit(
        self,
        item: ItemT,
        *,
        key: Hashable = None,
        timeout_s: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> ResultT:
        """Queue ``item`` and wait for its result (or its own exception).

        ``on_progress(done, total)`` is called from the worker thread at each step of the
        forward the item is in. Cancelling the awaiting task (a client that went away)
        drops the item: from the queue, or from its running forward at the next step.

        Raises:
            QueueFull: the queue holds ``queue_size`` items already.
            Closed: ``close()`` was called.
            DeadlineExceeded: no result within ``timeout_s``.
        """
        if self._closing:
            raise Closed("the batcher is closed")
        if self._queued >= self.queue_size:
            raise QueueFull(
                f"the queue is full ({self.queue_size} waiting)",
                retry_after_s=self._retry_after_estimate(),
            )
        now = self._clock()
        pending = _Pending(
            item=item,
            key=key,
            future=asyncio.get_running_loop().create_future(),
            enqueued_at=now,
            deadline=now + timeout_s if timeout_s is not None else math.inf,
            on_progress=on_progress,
        )
        self._groups.setdefault(key, deque()).append(pending)
        self._set_queued(self._queued + 1)
        self._wakeup.set()
        try:
            return await asyncio.wait_for(pending.future, timeout_s)
        except TimeoutError:
            self._abandon(pending, "deadline")
            raise DeadlineExceeded(f"no result within {timeout_s:g} s") from None
        except asyncio.CancelledError:
            self._abandon(pending, "caller_gone")
            raise

    # --------------------------------------------------------------- internals
    def _set_queued(self, value: int) -> None:
        self._queued = value
        self._observer.queue_depth(value)

    def _retry_after_estimate(self) -> float:
        batches_ahead = math.ceil(self._queued / self.max_batch_size) + 1
        return batches_ahead * (self._seconds_per_forward + self.max_wait_s)

    def _abandon(self, pending: _Pending, reason: str) -> None:
        """The caller stopped waiting: out of the queue, or out of its forward at the next
        step (the worker thread sees ``abandoned``)."""
        pending.abandoned = reason
        group = self._groups.get(pending.key)
        if group is not None and pending in group:
            group.remove(pending)
            self._set_queued(self._queued - 1)
            self._observer.cancelled(reason, "queued")
            if not group:
                del self._groups[pending.key]

    def _drop_expired(self, now: float) -> None:
        for key in list(self._groups):
            group = self._groups[key]
            kept = deque()
            for pending in group:
                if pending.future.done():
                    continue
                if now >= pending.deadline:
                    pending.future.set_exception(
                        DeadlineExceeded("dropped from the queue: past its deadline")
                    )
                    self._observer.cancelled("deadline", "queued")
                    continue
                kept.append(pending)
            if len(kept) != len(group):
                self._set_queued(self._queued - (len(group) - len(kept)))
            if kept:
                self._groups[key] = kept
            else:
                del self._groups[key]

    def _take_ready_batch(self) -> list[_Pending] | None:
        now = self._clock()
        self._drop_expired(now)
        ready = [
            (group[0].enqueued_at, key)
            for key, group in self._groups.items()
            if self._closing
            or len(group) >= self.max_batch_size
            or now - group[0].enqueued_at >= self.max_wait_s
        ]
        if not ready:
            return None
        _, key = min(ready, key=lambda pair: pair[0])
        group = self._groups[key]
        batch = [group.popleft() for _ in range(min(self.max_batch_size, len(group)))]
        if not group:
            del self._groups[key]
        self._set_queued(self._queued - len(batch))
        return batch

    def _seconds_to_next_flush(self) -> float | None:
        if not self._groups:
            return None
        oldest = min(group[0].enqueued_at for group in self._groups.values())
        return max(0.0, oldest + self.max_wait_s - self._clock())

    async def _run(self) -> None:
        while True:
            batch = self._take_ready_batch()
            if batch is not None:
                self._in_flight += len(batch)
                try:
                    await self._forward_resilient(batch)
                finally:
                    self._in_flight -= len(batch)
                continue
            if self._closing and not self._groups:
                return
            self._wakeup.clear()
            timeout = self._seconds_to_next_flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    def _call_forward(self, live: list[_Pending]) -> tuple[list[int], list[ResultT]]:
        control = BatchControl(live, self._clock, self._observer)
        results = list(self._forward([p.item for p in live], control))
        if len(results) != len(control.rows):
            raise RuntimeError(
                f"forward returned {len(results)} results for {len(control.rows)} items"
            )
        return control.rows, results

    async def _forward_resilient(self, batch: list[_Pending]) -> None:
        now = self._clock()
        live = []
        for pending in batch:
            if pending.future.done():
                continue  # the caller gave up
            if now >= pending.deadline:
                pending.future.set_exception(
                    DeadlineExceeded("dropped before the forward: past its deadline")
                )
                self._observer.cancelled("deadline", "queued")
                continue
            live.append(pending)
        if not live:
            return
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        try:
            rows, results = await loop.run_in_executor(self._executor, self._call_forward, live)
        except Exception as exc:
            await self._recover(live, exc)
            return
        seconds = time.perf_counter() - started
        self._seconds_per_forward = 0.8 * self._seconds_per_forward + 0.2 * seconds
        self.stats.forwards += 1
        self.stats.items += len(live)
        self._observer.batch_done(len(live), seconds)
        for row, result in zip(rows, results, strict=True):
            if not live[row].future.done():
                live[row].future.set_result(result)
        for pending in live:  # dropped at a step: past its deadline, or nobody waits
            if not pending.future.done():
                pending.future.set_exception(
                    DeadlineExceeded("stopped during the forward: past its deadline")
                )

    async def _recover(self, live: list[_Pending], exc: Exception) -> None:
        if len(live) == 1:
            if not live[0].future.done():
                live[0].future.set_exception(exc)
            return
        if self._is_out_of_memory(exc):
            if self._release_memory is not None:
                self._release_memory()
            half = len(live) // 2
            await self._forward_resilient(live[:half])
            await self._forward_resilient(live[half:])
            return
        for pending in live:  # one bad item must not fail its neighbours
            await self._forward_resilient([pending])

"""A generic dynamic batcher: many concurrent callers, one batched forward at a time.

Callers ``await batcher.submit(item, key=..., timeout_s=...)``; one background task
groups queued items by ``key`` (only items with equal keys are compatible, e.g. same
image size and options) and calls ``forward(items) -> results`` on a worker thread, so
the event loop keeps serving while the model runs.

Flush policy, for each key group:

* full: ``len(group) >= max_batch_size``, or the group's cost (``cost(item)`` summed,
  e.g. pixels) reaches ``max_batch_cost``, flushes at once;
* waited: the group's oldest item has waited ``max_wait_s``;
* closing: everything left is flushed so accepted requests finish.

Fair share: every item has an ``owner`` (an API key's name). When several groups are
ready, the one holding the owner served least recently goes first, and a batch is
filled round-robin across the owners in its group, so one owner's backlog delays
another owner's request by about one batch, never by the whole backlog.

Priority: batchers of one device share a :class:`DeviceGate`, each with its ``rank``
(0 the most urgent). A forward yields the device at each step boundary while a more
urgent forward runs or waits, or a more urgent batcher has items queued: a request
waits for at most one step of a less urgent batch, which then resumes where it paused. Inside a step it may yield too, through its
control's ``pause`` hook (``models.control.pause_hook``), which the worker pool calls
between the layers of the model's networks (``service.workers.pool``): a long step (a
print's base, a whole pyramid at 1024 px) then holds the device one layer at a time.

Failure policy:

* ``forward`` raising (or returning a list of the wrong length) on a batch of n > 1 is
  retried item by item, so one poisoned request fails alone and the others succeed; a
  failure on a single item goes to that caller only.
* An out-of-memory error on a batch (``is_out_of_memory`` says which errors are; the
  caller passes the test in, and ``release_memory`` to run before the retry) splits it
  in halves and retries each half. The failed forward's frames (its activations) are
  released first: the retry never runs inside the ``except`` block, the error keeps no
  traceback, and ``release_memory`` runs on the worker thread, not the event loop.
* An item past its deadline is dropped before any forward and its caller gets
  ``Expired``; a caller that stops waiting is removed from the queue.
* Inside a forward, work nobody waits for stops: ``forward(items, control)`` gets a
  :class:`BatchControl`, a step control (``models.control.StepControl``) that the model
  asks between its steps; it drops the rows whose caller stopped waiting or whose
  deadline passed, so their work stops within one step while the others go on. The
  same calls report each item's progress to its ``on_progress`` callback. When an item
  of the batch has an ``on_preview`` callback (and only then), the control also has a
  ``show(done, total, pictures)`` hook for the forward to hand it the batch's pictures
  as they form (``models.control.ShowImages``); each such item gets its own row's.
* ``queue_size`` bounds the items waiting (not yet in a forward); past it ``submit``
  raises ``QueueFull`` with a retry-after estimate.

A caller that cancels its ``submit`` with the message ``"deadline"``
(``task.cancel("deadline")``) is counted as a deadline, any other cancel as
``caller_gone``.

The module knows nothing of torch or HTTP: its errors are its own, and the worker layer
maps them to API errors (each model's entry point sets the framework's inference mode
itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")

#: Why a queued or running item stopped being wanted.
CALLER_GONE, DEADLINE = "caller_gone", "deadline"


class BatcherError(Exception):
    """Base of the batcher's own errors (the worker layer maps them to API errors)."""


class QueueFull(BatcherError):
    """``queue_size`` items wait already; ``retry_after_s`` estimates when one leaves."""

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Closed(BatcherError):
    """``close()`` was called: no new items."""


class Expired(BatcherError):
    """The item had no result before its deadline (it was dropped, or stopped waiting);
    the worker pool answers it as ``service.errors.DeadlineExceeded`` (504)."""


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
#: ``on_preview(done, total, picture)``: an item's picture after ``done`` steps, from the
#: worker thread; ``picture()`` gives it (the forward's own form; only during the call).
PreviewCallback = Callable[[int, int, Callable[[], Any]], None]


class DeviceGate:
    """Step-level priority on one device between forwards of ranked work.

    Every forward has a rank, 0 the most urgent (``service.priorities.PRIORITIES`` gives
    the service's three). A forward holds the device between :meth:`begin` and
    :meth:`end` and, at each of its step boundaries, calls :meth:`step`, which gives the
    device up while any more urgent forward is active or waits for it, and takes it back
    once none is. So a forward waits for at most one step of each less urgent forward in
    progress (they pause at their next boundary), and never waits for a less urgent one
    to end. Forwards of the same rank (of different models) may run together; a paused
    forward keeps its state (its latents or features) and continues from the step where
    it stopped.

    The rule a forward of rank ``r`` runs by: no forward of a rank below ``r`` is active
    or waiting, and none of a rank above ``r`` holds the device. A batcher with items of
    rank ``r`` queued counts as a waiting forward too (:meth:`expect`): a less urgent
    forward does not start its next step while a batch that will want the device is
    being formed, so it cannot take the device between two batches of more urgent work.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        #: per rank: forwards begun and not ended (running, paused or waiting to begin)
        self._wanting: dict[int, int] = {}
        #: per rank: forwards holding the device now
        self._holding: dict[int, int] = {}
        #: per rank: batchers with work queued or in a forward (:meth:`expect`)
        self._expected: dict[int, int] = {}
        #: forwards paused at a step boundary (for tests and metrics)
        self.paused = 0

    def waiting(self, rank: int) -> int:
        """Forwards of ``rank`` begun and not ended (running, paused or waiting)."""
        with self._changed:
            return self._wanting.get(rank, 0)

    def _clear(self, rank: int) -> bool:
        """Whether a forward of ``rank`` may hold the device (the class's rule)."""
        urgent = (self._wanting, self._expected)
        more_urgent = any(n for counts in urgent for other, n in counts.items() if other < rank)
        less_urgent = any(n for other, n in self._holding.items() if other > rank)
        return not more_urgent and not less_urgent

    def expect(self, rank: int, expected: bool) -> None:
        """A batcher of ``rank`` has items queued or in a forward (``expected``), or no
        longer has: while it has, forwards of a higher rank pause at their steps."""
        with self._changed:
            self._expected[rank] = self._expected.get(rank, 0) + (1 if expected else -1)
            self._changed.notify_all()

    def begin(self, rank: int) -> None:
        """Wait for the device, then hold it for a forward of ``rank``."""
        with self._changed:
            self._wanting[rank] = self._wanting.get(rank, 0) + 1
            self._changed.notify_all()  # less urgent forwards pause at their next step
            self._changed.wait_for(lambda: self._clear(rank))
            self._holding[rank] = self._holding.get(rank, 0) + 1

    def step(self, rank: int) -> None:
        """Between two steps of a forward of ``rank``: give the device to any more urgent
        forward, wait until none is left, then go on."""
        with self._changed:
            if self._clear(rank):
                return
            self._holding[rank] -= 1
            self.paused += 1
            self._changed.notify_all()
            self._changed.wait_for(lambda: self._clear(rank))
            self.paused -= 1
            self._holding[rank] += 1

    def end(self, rank: int) -> None:
        """The forward of ``rank`` ended: the device is free for the others."""
        with self._changed:
            self._holding[rank] -= 1
            self._wanting[rank] -= 1
            self._changed.notify_all()

    @contextlib.contextmanager
    def holding(self, rank: int) -> Iterator[Callable[[], None]]:
        """``begin(rank)`` ... ``end(rank)``; gives the forward its step boundary call."""
        self.begin(rank)
        try:
            yield partial(self.step, rank)
        finally:
            self.end(rank)


@dataclass(eq=False)
class _Pending:
    item: Any
    key: Hashable
    future: asyncio.Future[Any]
    enqueued_at: float
    deadline: float = math.inf
    on_progress: ProgressCallback | None = None
    on_preview: PreviewCallback | None = None
    owner: str = ""
    cost: float = 0.0
    #: why the caller stopped waiting; set on the event loop, read by the worker thread
    abandoned: str | None = None

    def unwanted(self, now: float) -> str | None:
        """Why nobody waits for this item any more (``None``: somebody does)."""
        if self.abandoned is not None:
            return self.abandoned
        if now >= self.deadline:
            return DEADLINE
        return None


class BatchControl:
    """What a forward asks between its steps: which of its items are still wanted.

    Called as ``control(done, total)`` (the ``models.control.StepControl`` contract)
    before step ``done`` of ``total`` and once with ``done == total`` at the end. A
    ranked forward first yields the device to more urgent work (:class:`DeviceGate`),
    as :meth:`pause` does at any other point inside a step. It then
    reports the progress of every item still computed, counts one unit of work per item
    per step started, and answers the positions (in the batch as it is now) of the items
    still wanted, or ``None`` when all are.

    ``rows`` is then the items (by their index in the forward's list) still in the
    batch, in batch order: a forward returns one result for each of them.
    """

    def __init__(
        self,
        pending: Sequence[_Pending],
        clock: Callable[[], float],
        observer: BatchObserver,
        yield_device: Callable[[], None] | None = None,
    ) -> None:
        self._pending = list(pending)
        self._clock = clock
        self._observer = observer
        self._yield_device = yield_device
        self.rows: list[int] = list(range(len(self._pending)))
        #: The pause hook (``models.control.pause_hook``): installed for ranked forwards.
        self.pause: Callable[[], None] | None = yield_device
        #: The pictures hook: installed only when an item asked for previews.
        self.show: Callable[[int, int, Callable[[], Sequence[Any]]], None] | None = None
        if any(pending.on_preview is not None for pending in self._pending):
            self.show = self._show

    def _show(self, done: int, total: int, pictures: Callable[[], Sequence[Any]]) -> None:
        """Hand each item that asked for previews its row of ``pictures()`` (the batch in
        ``rows`` order), which is read once, and only if a callback asks for it."""
        batch: list[Sequence[Any]] = []

        def row(position: int) -> Any:
            if not batch:
                batch.append(pictures())
            return batch[0][position]

        for position, index in enumerate(self.rows):
            callback = self._pending[index].on_preview
            if callback is not None:
                callback(done, total, partial(row, position))

    def __call__(self, done: int, total: int) -> list[int] | None:
        if self._yield_device is not None and 0 < done < total:
            self._yield_device()
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


def _free(exc: BaseException) -> BaseException:
    """``exc`` without its traceback or chained errors, so that the frames of the failed
    forward (and the activations they hold) can be freed before anything is retried."""
    exc.__traceback__ = None
    exc.__context__ = exc.__cause__ = None
    return exc


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
        release_memory: called on the worker thread before the halves are retried (e.g.
            emptying an allocator's cache).
        cost: an item's share of ``max_batch_cost`` (e.g. its pixels); 0 if unset.
        max_batch_cost: most total cost in one forward (a memory budget); a single
            item over it still runs alone.
        gate: the device's :class:`DeviceGate`, shared with the device's other batchers.
        rank: this batcher's rank at the gate (0 the most urgent): its forwards yield the
            device at each step while a more urgent forward runs or waits.
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
        cost: Callable[[ItemT], float] | None = None,
        max_batch_cost: float = math.inf,
        gate: DeviceGate | None = None,
        rank: int = 0,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be >= 0, got {max_wait_s}")
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size}")
        if rank < 0:
            raise ValueError(f"rank must be >= 0, got {rank}")
        if not max_batch_cost > 0:
            raise ValueError(f"max_batch_cost must be > 0, got {max_batch_cost}")
        self._forward = forward
        self._is_out_of_memory = is_out_of_memory
        self._release_memory = release_memory
        self._cost = cost
        self.max_batch_size = max_batch_size
        self.max_batch_cost = max_batch_cost
        self.max_wait_s = max_wait_s
        self.queue_size = queue_size
        self._clock = clock
        self._observer = observer or _NullObserver()
        self._gate = gate
        self.rank = rank
        self._expected = False  # whether this batcher's work is announced to the gate
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._groups: dict[Hashable, deque[_Pending]] = {}
        self._served: dict[str, int] = {}  # owner -> when it was last served
        self._turn = itertools.count(1)
        self._queued = 0
        self._in_flight = 0
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
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
        owner: str = "",
        on_preview: PreviewCallback | None = None,
    ) -> ResultT:
        """Queue ``item`` and wait for its result (or its own exception).

        ``on_progress(done, total)`` is called from the worker thread at each step of the
        forward the item is in; ``on_preview(done, total, picture)`` (see
        :data:`PreviewCallback`) sees its picture when the forward shows one. Cancelling
        the awaiting task (a client that went away) drops the item: from the queue, or
        from its running forward at the next step.
        ``owner`` is whose work it is, for the fair share.

        Raises:
            QueueFull: the queue holds ``queue_size`` items already.
            Closed: ``close()`` was called.
            Expired: no result within ``timeout_s``.
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
            on_preview=on_preview,
            owner=owner,
            cost=self._cost(item) if self._cost is not None else 0.0,
        )
        self._groups.setdefault(key, deque()).append(pending)
        self._set_queued(self._queued + 1)
        self._announce()
        self._wakeup.set()
        try:
            return await asyncio.wait_for(pending.future, timeout_s)
        except TimeoutError:
            self._abandon(pending, DEADLINE)
            raise Expired(f"no result within {timeout_s:g} s") from None
        except asyncio.CancelledError as exc:
            self._abandon(pending, DEADLINE if DEADLINE in exc.args else CALLER_GONE)
            raise

    # --------------------------------------------------------------- internals
    def _set_queued(self, value: int) -> None:
        self._queued = value
        self._observer.queue_depth(value)

    def _announce(self) -> None:
        """Tell the gate whether this batcher has work, queued or in a forward (called
        where that may change, never between a batch's leaving the queue and its
        forward's start, so that the device is not given away in between)."""
        expected = self._queued + self._in_flight > 0
        if self._gate is not None and expected != self._expected:
            self._expected = expected
            self._gate.expect(self.rank, expected)

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
            self._announce()

    def _drop_expired(self, now: float) -> None:
        for key in list(self._groups):
            group = self._groups[key]
            kept = deque(self._wanted(group, now, "from the queue"))
            if len(kept) != len(group):
                self._set_queued(self._queued - (len(group) - len(kept)))
            if kept:
                self._groups[key] = kept
            else:
                del self._groups[key]
        self._announce()

    def _is_full(self, group: deque[_Pending]) -> bool:
        return (
            len(group) >= self.max_batch_size or sum(p.cost for p in group) >= self.max_batch_cost
        )

    def _last_served(self, owner: str) -> int:
        return self._served.get(owner, 0)

    def _take_ready_batch(self) -> list[_Pending] | None:
        now = self._clock()
        self._drop_expired(now)
        ready = [
            key
            for key, group in self._groups.items()
            if self._closing
            or self._is_full(group)
            or now - group[0].enqueued_at >= self.max_wait_s
        ]
        if not ready:
            return None

        def rank(key: Hashable) -> tuple[int, float]:
            group = self._groups[key]
            return min(self._last_served(p.owner) for p in group), group[0].enqueued_at

        key = min(ready, key=rank)
        group = self._groups[key]
        batch = self._fill_fairly(group)
        if not group:
            del self._groups[key]
        self._set_queued(self._queued - len(batch))
        return batch

    def _fill_fairly(self, group: deque[_Pending]) -> list[_Pending]:
        """Take up to ``max_batch_size`` items (within ``max_batch_cost``) from ``group``,
        each time the oldest item of the owner served least recently."""
        batch: list[_Pending] = []
        cost = 0.0
        while group and len(batch) < self.max_batch_size:
            pending = min(group, key=lambda p: (self._last_served(p.owner), p.enqueued_at))
            if batch and cost + pending.cost > self.max_batch_cost:
                break
            group.remove(pending)
            batch.append(pending)
            cost += pending.cost
            self._served[pending.owner] = next(self._turn)
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
                    self._announce()
                continue
            if self._closing and not self._groups:
                return
            self._wakeup.clear()
            timeout = self._seconds_to_next_flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    def _call_forward(self, live: list[_Pending]) -> tuple[list[int], list[ResultT]]:
        """One forward on the worker thread, under the device gate."""
        gate = self._gate
        if gate is None:
            return self._forward_rows(live, None)
        with gate.holding(self.rank) as step:
            # the most urgent rank never yields: nothing can be waiting ahead of it
            return self._forward_rows(live, step if self.rank > 0 else None)

    def _forward_rows(
        self, live: list[_Pending], yield_device: Callable[[], None] | None
    ) -> tuple[list[int], list[ResultT]]:
        control = BatchControl(live, self._clock, self._observer, yield_device)
        results = list(self._forward([p.item for p in live], control))
        if len(results) != len(control.rows):
            raise RuntimeError(
                f"forward returned {len(results)} results for {len(control.rows)} items"
            )
        return control.rows, results

    def _live(self, batch: list[_Pending]) -> list[_Pending]:
        """The items of ``batch`` still wanted; the others get their answer now."""
        return self._wanted(batch, self._clock(), "before the forward")

    def _wanted(self, pendings: Iterable[_Pending], now: float, where: str) -> list[_Pending]:
        """The items of ``pendings`` still wanted at ``now``, in order: one whose caller
        gave up is left out; one past its deadline is left out too, answered with
        :class:`Expired` (``"dropped <where>: past its deadline"``) and counted as a
        deadline cancel of a queued item."""
        wanted = []
        for pending in pendings:
            if pending.future.done():
                continue  # the caller gave up
            if now >= pending.deadline:
                pending.future.set_exception(Expired(f"dropped {where}: past its deadline"))
                self._observer.cancelled(DEADLINE, "queued")
                continue
            wanted.append(pending)
        return wanted

    async def _forward_resilient(self, batch: list[_Pending]) -> None:
        """Run ``batch``; on failure retry its parts (halves after an out-of-memory, else
        item by item) until every item has its result or its own error.

        The parts wait on a stack, not in nested calls: by the time a part is retried
        the failed forward's frames are gone (its error is kept without a traceback)
        and ``release_memory`` has run on the worker thread.
        """
        loop = asyncio.get_running_loop()
        parts = [batch]
        while parts:
            live = self._live(parts.pop())
            if not live:
                continue
            started = time.perf_counter()
            try:
                rows, results = await loop.run_in_executor(self._executor, self._call_forward, live)
            except Exception as exc:
                out_of_memory = self._is_out_of_memory(exc)
                failure = _free(exc) if out_of_memory else exc
            else:
                self._deliver(live, rows, results, time.perf_counter() - started)
                continue
            if out_of_memory and self._release_memory is not None:
                await loop.run_in_executor(self._executor, self._release_memory)
            if len(live) == 1:
                if not live[0].future.done():
                    live[0].future.set_exception(failure)
                continue
            del failure  # each part gets its own answer; the batch's error is dropped
            if out_of_memory:
                half = len(live) // 2
                parts += [live[half:], live[:half]]  # the first half runs first
            else:  # one bad item must not fail its neighbours
                parts += [[pending] for pending in reversed(live)]

    def _deliver(
        self, live: list[_Pending], rows: list[int], results: list[ResultT], seconds: float
    ) -> None:
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
                    Expired("stopped during the forward: past its deadline")
                )

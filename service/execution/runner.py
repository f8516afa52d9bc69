"""The worker side of the job queue: claim, run, renew, report, finish; and drain.

A :class:`JobRunner` serves the models of one process's worker pools. For each model it
claims jobs from the store while the pool has room (interactive jobs up to the
interactive queue's bound; background jobs up to one full batch per device, so the
store's fair order decides what runs next, not a local backlog; past that bound, up to
a second batch, only a job of a key with no background work here, which then runs as
interactive work: it takes the device from the other keys' batch at its next step, so
one key's backlog delays another key's job by about a step, not a batch), runs each claimed job
as a task on the pool, and writes its progress (at most every ``progress_interval_s``,
the first an interval after the job starts, so a job shorter than that writes none: its
finish sets ``step = total``), its latest live preview when it was asked for them
(``service.execution.previews``: a checkpoint the store drops when the job ends) and
its result (once). A job that a request of this process waits for needs no claim
when there is room for it: :meth:`JobRunner.create` has the store lease it to this
worker in the write that creates it, and it starts at once.

While jobs run, a heartbeat renews their leases every third of ``lease_s`` and
re-advertises the worker's models. A cancel reaches the runner through the store's
change notifications (a ``cancel:{id}`` topic, from any replica) or, failing those, at
the next heartbeat; the job's task is cancelled and its batch drops it at the next
step. A job whose lease was lost (this worker was too slow to renew, and the job went
back to the queue) is stopped too, without writing anything.

:meth:`JobRunner.drain` (SIGTERM) stops claiming, lets running jobs finish until its
timeout, then hands the rest back to the queue, where another worker (or this one,
restarted) runs them again: nothing accepted is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from functools import partial
from typing import Any

from models.devices import return_freed_memory
from service.config import Settings
from service.errors import InternalError, ResultTooLarge, ServiceError, StorageFull
from service.execution.kinds import work_from_payload
from service.execution.previews import Previews
from service.execution.work import Checkpoint, Progress, RunContext, Work
from service.jobs.previews import PREVIEW_CHECKPOINT, wants_previews
from service.jobs.records import (
    CANCELLED,
    FAILED,
    OFF_LOOP_BYTES,
    SUCCEEDED,
    JobRecord,
    JobResult,
    off_loop_if_large,
)
from service.jobs.store import (
    Claim,
    JobStore,
    StoreFull,
    StoreUnavailable,
    cancel_topic,
    cancelled_error,
    job_topic,
    late_error,
    work_topic,
)
from service.metrics import Metrics
from service.priorities import BACKGROUND, BULK, INTERACTIVE, off_loop_as_bulk
from service.workers.pool import AnyWorkerPool

logger = logging.getLogger("atelier.jobs.runner")

#: Why a running job's task was cancelled (the message of its ``CancelledError``).
ASKED, HANDED_BACK, LOST = "cancelled", "handed_back", "lost"


def worker_name() -> str:
    """``host-pid-random``: unique per process, readable in a job's ``worker`` field."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(eq=False)
class _Running:
    model: str
    priority: str
    parts: int
    owner: str
    #: A background job of a key that had nothing running here, claimed past the
    #: one-batch bound: it runs as interactive work, taking the device from the other
    #: keys' background batch at its next step.
    promoted: bool = False
    #: A bulk job (a print) holding one of the device's bulk slots: from its claim until
    #: its forwards are done (``RunContext.done_with_device``), not while its result is
    #: encoded and stored, so that the next print's painting overlaps that CPU work.
    bulk_slot: bool = False
    task: asyncio.Task[None] | None = None
    progress: Progress | None = None
    write_pending: bool = False
    last_write: float = 0.0
    watchers: list[asyncio.Task[None]] = field(default_factory=list)
    #: The latest preview not yet written, and whether a write of previews is under way.
    preview: bytes | None = None
    writing_preview: bool = False
    #: Its result is being stored: nothing stops it now. A stop (a lost-lease notice that
    #: raced the job's own finish, a cancel) landing while the store's thread commits
    #: would delete the result file a succeeded job names (``_finish``'s clean-up).
    storing: bool = False


# eq and repr as object's: one runner per process, compared and shown as itself
@dataclass(eq=False, repr=False)
class JobRunner:
    """Runs the store's jobs on ``pools`` (see the module docstring).

    Args:
        store: the job store.
        pools: this process's worker pools by model name.
        metrics: where job outcomes are counted.
        settings: the service's settings: the lease taken on each claimed job
            (``job_lease_s``), the least time between two progress writes of a job
            (``job_progress_interval_s``), the pools' batcher bounds that claims stay
            within (``max_batch_size``, ``queue_size``), the prints painted at once per
            device (``bulk_jobs_per_device``), the largest result (``job_results_max_bytes``:
            past it a job fails with result_too_large).
        worker: this worker's name (unique per process).
    """

    store: JobStore
    pools: Mapping[str, AnyWorkerPool]
    metrics: Metrics
    settings: Settings
    _: KW_ONLY
    worker: str
    _running: dict[str, _Running] = field(default_factory=dict, init=False)
    _claiming: bool = field(default=False, init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)
    _room: dict[str, asyncio.Event] = field(init=False)

    def __post_init__(self) -> None:
        self.pools = dict(self.pools)  # a copy: later changes to the caller's are not seen
        self._room = {model: asyncio.Event() for model in self.pools}

    @property
    def running(self) -> list[str]:
        """The ids of the jobs this worker runs now (not one it is creating)."""
        return [job_id for job_id, running in self._running.items() if running.task]

    def details(self) -> dict[str, dict[str, Any]]:
        return {name: pool.details for name, pool in self.pools.items()}

    async def start(self) -> None:
        """Advertise the models, then start claiming and the heartbeat."""
        if not self.pools:
            return
        self._claiming = True
        loop = self._loop = asyncio.get_running_loop()
        with contextlib.suppress(StoreUnavailable):
            await self.store.publish_models(self.worker, self.details(), self.settings.job_lease_s)
        self._tasks = [loop.create_task(self._claim_loop(model)) for model in self.pools]
        self._tasks.append(loop.create_task(self._heartbeat()))

    # ------------------------------------------------------------------ claiming
    def _free(self, model: str) -> tuple[tuple[str, ...], frozenset[str] | None]:
        """The priorities this worker can take another job of ``model`` for; and, when
        background work is at its bound, the keys it runs background work of (a job of
        any other key may still be claimed, up to a second batch, and run promoted), or
        ``None`` when there is no such room. Bulk jobs (prints) have room of their own:
        ``bulk_jobs_per_device`` slots per device (:attr:`_Running.bulk_slot`), whatever
        the background work."""
        devices = len(self.pools[model].devices)
        items = {INTERACTIVE: 0, BACKGROUND: 0, BULK: 0}
        background_owners = set()
        slots_held = 0
        for running in self._running.values():
            if running.model == model:
                items[running.priority] += running.parts
                slots_held += running.bulk_slot
                if running.priority == BACKGROUND:
                    background_owners.add(running.owner)
        free = []
        if items[INTERACTIVE] < self.settings.queue_size * devices:
            free.append(INTERACTIVE)
        batch = self.settings.max_batch_size * devices
        bulk = (BULK,) if slots_held < self.settings.bulk_jobs_per_device * devices else ()
        if items[BACKGROUND] < batch:
            return (*free, BACKGROUND, *bulk), None
        if items[BACKGROUND] < 2 * batch:
            return (*free, *bulk), frozenset(background_owners)
        return (*free, *bulk), None

    async def _claim(self, model: str) -> tuple[Claim | None, bool] | None:
        """The next job and whether it runs promoted; ``None`` when there is no room."""
        priorities, busy_owners = self._free(model)
        if not priorities and busy_owners is None:
            return None
        if priorities:
            claim = await self.store.claim(
                self.worker, model, priorities, self.settings.job_lease_s
            )
            if claim is not None or busy_owners is None:
                return claim, False
        assert busy_owners is not None
        claim = await self.store.claim(
            self.worker, model, (BACKGROUND,), self.settings.job_lease_s, skip_owners=busy_owners
        )
        return claim, claim is not None

    async def _claim_loop(self, model: str) -> None:
        backoff = 0.1
        with self.store.hub.watch(work_topic(model)) as work_arrived:
            while self._claiming:
                try:
                    next_job = await self._claim(model)
                except StoreUnavailable:
                    await asyncio.sleep(backoff)
                    backoff = min(2 * backoff, 2.0)
                    continue
                backoff = 0.1
                if next_job is None:
                    self._room[model].clear()
                    await self._room[model].wait()
                    continue
                claim, promoted = next_job
                more = claim is not None and claim.more
                if claim is not None:
                    record = claim.record
                    running = _Running(
                        model,
                        record.priority,
                        record.parts,
                        record.owner,
                        promoted,
                        bulk_slot=record.priority == BULK,
                    )
                    self._begin(running, claim)
                del next_job, claim  # the job's input is its task's now (freed once decoded)
                if not more:  # a job queued from now on announces itself
                    await work_arrived.wait(self.settings.job_lease_s / 3)

    async def create(
        self,
        record: JobRecord,
        payload: bytes,
        work: Work,
        *,
        owner_max_jobs: int,
        idempotency: tuple[str, str] | None,
    ) -> tuple[JobRecord, bool]:
        """Create a job that a request here waits for (``JobStore.create``); when this
        worker serves its model and has room for it, the job runs here at once: the
        create itself leases it to this worker, so it neither waits in the queue nor for
        a claim (as the same request without a job runs at once on the pool). Without
        room it queues, for the store's order to decide."""
        model = record.model
        if (
            not self._claiming
            or model not in self.pools
            or record.priority not in self._free(model)[0]
        ):
            return await self.store.create(
                record, payload, owner_max_jobs=owner_max_jobs, idempotency=idempotency
            )
        running = _Running(model, record.priority, record.parts, record.owner)
        self._running[record.id] = running  # its room, held while the store writes
        try:
            job, created = await self.store.create(
                record,
                payload,
                owner_max_jobs=owner_max_jobs,
                idempotency=idempotency,
                run_by=(self.worker, self.settings.job_lease_s),
            )
        except BaseException:
            self._forget(record.id, model)
            raise
        if not created:  # an idempotent replay: the first request's job, wherever it is
            self._forget(record.id, model)
        elif not self._claiming:  # draining began meanwhile: back to the queue
            self._forget(record.id, model)
            with contextlib.suppress(StoreUnavailable):
                await self.store.release(self.worker, [job.id])
        else:
            self._begin(running, Claim(job, payload, more=False), work)
        return job, created

    def _forget(self, job_id: str, model: str) -> None:
        self._running.pop(job_id, None)
        self._room[model].set()

    def _begin(self, running: _Running, claim: Claim, work: Work | None = None) -> None:
        """Run the claimed job (``work``: its input, when the caller has it decoded). The
        job's task holds its payload only until it is decoded (a print's photo: its
        upload, up to tens of MB), so a caller lets the claim go once the job has begun."""
        record = claim.record
        self._running[record.id] = running
        job_input = claim.payload if work is None else work
        running.task = asyncio.get_running_loop().create_task(
            self._execute(record, running, job_input), name=f"job-{record.id}"
        )
        running.watchers.append(
            asyncio.get_running_loop().create_task(self._watch_cancel(record.id, running))
        )

    # ------------------------------------------------------------------- running
    async def _execute(self, record: JobRecord, running: _Running, job_input: Work | bytes) -> None:
        outcome = FAILED
        try:
            if record.cancel_requested:
                raise asyncio.CancelledError(ASKED)
            work = (
                job_input if isinstance(job_input, Work) else await self._decode(record, job_input)
            )
            del job_input  # a payload's bytes go once decoded
            timeout = None
            if record.deadline_at is not None:
                timeout = record.deadline_at - time.time()  # set by a replica's clock too
                if timeout <= 0:
                    raise _DeadlinePassed()
            # the first write comes an interval after the start, as every later one: a
            # job shorter than the interval writes no progress (its finish sets the total)
            running.last_write = time.monotonic()
            running.progress = Progress(work.parts, lambda: self._progress_changed(record.id))
            previews = None
            if wants_previews(record):
                previews = Previews(partial(self._preview_taken, record.id))
            result = await work.run(
                self.pools[running.model],
                RunContext(
                    priority=INTERACTIVE if running.promoted else record.priority,
                    timeout_s=timeout,
                    progress=running.progress,
                    owner=record.owner,
                    checkpoint=StoreCheckpoint(self.store, record.id, self.worker),
                    previews=previews,
                    on_device_done=partial(self._free_bulk_slot, running),
                ),
            )
        except asyncio.CancelledError as exc:
            reason = exc.args[0] if exc.args else ASKED
            if reason in (HANDED_BACK, LOST):
                outcome = reason
                return
            outcome = CANCELLED
            await self._finish(record.id, CANCELLED, error=cancelled_error())
        except _DeadlinePassed:
            await self._finish(record.id, FAILED, error=late_error())
        except ServiceError as exc:
            await self._finish(record.id, FAILED, error=exc.as_dict())
        except Exception:
            logger.exception("job failed", extra={"job_id": record.id, "kind": record.kind})
            await self._finish(record.id, FAILED, error=InternalError("internal error").as_dict())
        else:
            running.storing = True
            outcome = await self._store_result(record.id, result)
            if record.priority == BULK:  # a print's pictures and bytes went: give them back
                del result, work
                await off_loop_as_bulk(return_freed_memory)
        finally:
            for watcher in running.watchers:
                watcher.cancel()
            self._running.pop(record.id, None)
            self._room[running.model].set()
            self.metrics.jobs.labels(running.model, outcome).inc()

    def _free_bulk_slot(self, running: _Running) -> None:
        """A bulk job's forwards are done: its slot goes to the next print."""
        if running.bulk_slot:
            running.bulk_slot = False
            self._room[running.model].set()

    @staticmethod
    async def _decode(record: JobRecord, payload: bytes) -> Work:
        """The claimed job's work. An async job's large payload (a print's photo) is
        decoded on the low-priority bulk threads: nobody waits on a connection for it,
        and the forwards running meanwhile go first; an interactive job's on a thread."""
        if record.priority != INTERACTIVE and len(payload) > OFF_LOOP_BYTES:
            return await off_loop_as_bulk(_decode_and_trim, payload)
        return await off_loop_if_large(len(payload), work_from_payload, payload)

    async def _store_result(self, job_id: str, result: JobResult) -> str:
        if result.size > self.settings.job_results_max_bytes:
            message = (
                f"the result is {result.size} bytes, over job_results_max_bytes = "
                f"{self.settings.job_results_max_bytes}"
            )
            await self._finish(job_id, FAILED, error=ResultTooLarge(message).as_dict())
            return FAILED
        # in pieces: a print's image is written to the store as it is, never copied
        # whole; the store sets step = total
        return await self._finish(job_id, SUCCEEDED, result=result.packed())

    async def _finish(self, job_id: str, state: str, **outcome: Any) -> str:
        """Write the outcome and the job's last progress, retrying while the store is
        away (the lease keeps the job ours meanwhile; if it runs out, another worker
        reruns the job and the first outcome written wins). A result the store has no
        room for fails the job with ``storage_full`` instead. Returns the state written
        (or meant, when the store stayed away)."""
        running = self._running.get(job_id)
        if running is not None and running.progress is not None:
            outcome["progress"] = running.progress.current()
        delay = 0.1
        for _ in range(12):
            try:
                await self.store.finish(job_id, state, **outcome)
                return state
            except StoreFull as exc:
                if outcome.get("result") is None:  # a small write: space may come back
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, 5.0)
                    continue
                # the result does not fit: the job fails now, once, without its result
                # (a rerun would make the same bytes, which would not fit either)
                logger.warning("a job's result could not be stored", extra={"job_id": job_id})
                state = FAILED
                outcome = {
                    "error": StorageFull(
                        f"its result could not be stored: {exc.message}"
                    ).as_dict(),
                    "progress": outcome.get("progress"),
                }
            except StoreUnavailable:
                await asyncio.sleep(delay)
                delay = min(2 * delay, 5.0)
        logger.error(
            "could not write a job's outcome; its lease will run out", extra={"job_id": job_id}
        )
        return state

    async def _watch_cancel(self, job_id: str, running: _Running) -> None:
        """Cancel the job's task when somebody asks (any replica's DELETE)."""
        with self.store.hub.watch(cancel_topic(job_id)) as asked:
            while True:
                if await asked.wait(self.settings.job_lease_s / 3):
                    with contextlib.suppress(StoreUnavailable):
                        record = await self.store.get(job_id)
                        if record is None or record.cancel_requested:
                            self._stop(job_id, ASKED)  # not while it stores its result
                            return

    # ------------------------------------------------------------------ progress
    def _progress_changed(self, job_id: str) -> None:
        """From the worker thread: a step was reported."""
        with contextlib.suppress(RuntimeError):  # the loop closed
            self._loop.call_soon_threadsafe(self._schedule_progress, job_id)

    def _schedule_progress(self, job_id: str) -> None:
        running = self._running.get(job_id)
        if running is None or running.write_pending:
            return
        running.write_pending = True
        delay = max(
            0.0, running.last_write + self.settings.job_progress_interval_s - time.monotonic()
        )
        self._loop.call_later(delay, lambda: asyncio.ensure_future(self._progress_now(job_id)))

    async def _progress_now(self, job_id: str) -> None:
        running = self._running.get(job_id)
        if running is None or running.progress is None:
            return
        running.write_pending = False
        running.last_write = time.monotonic()
        step, total = running.progress.current()
        with contextlib.suppress(StoreUnavailable):
            await self.store.set_progress(job_id, self.worker, step, total)

    # ------------------------------------------------------------------ previews
    def _preview_taken(self, job_id: str, blob: bytes) -> None:
        """From the worker thread: a preview of the job (``service.execution.previews``)."""
        with contextlib.suppress(RuntimeError):  # the loop closed
            self._loop.call_soon_threadsafe(self._keep_preview, job_id, blob)

    def _keep_preview(self, job_id: str, blob: bytes) -> None:
        running = self._running.get(job_id)
        if running is None or running.task is None or running.task.done():
            return
        running.preview = blob  # a newer one replaces one not yet written
        if not running.writing_preview:
            running.writing_preview = True
            running.watchers = [task for task in running.watchers if not task.done()]
            running.watchers.append(self._loop.create_task(self._write_previews(job_id, running)))

    async def _write_previews(self, job_id: str, running: _Running) -> None:
        """Write the job's latest preview as its checkpoint (the store keeps one, and
        forgets it when the job ends), then tell the job's event feeds: this process's
        at once, other processes' with the next progress write (the store announces it).
        A preview the store cannot take is dropped (the next one may pass)."""
        try:
            while running.preview is not None:
                blob, running.preview = running.preview, None
                try:
                    kept = await self.store.put_checkpoint(
                        job_id, self.worker, PREVIEW_CHECKPOINT, blob
                    )
                except StoreUnavailable:
                    continue
                if not kept:  # the job is no longer this worker's, or it ended
                    return
                self.store.hub.notify(job_topic(job_id))
                self._schedule_progress(job_id)
        finally:
            running.writing_preview = False

    # ----------------------------------------------------------------- heartbeat
    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.settings.job_lease_s / 3)
            try:
                await self.store.publish_models(
                    self.worker, self.details(), self.settings.job_lease_s
                )
                cancelled, lost = await self.store.renew(
                    self.worker, self.running, self.settings.job_lease_s
                )
            except StoreUnavailable:
                continue
            for job_id in cancelled:
                self._stop(job_id, ASKED)
            for job_id in lost:
                logger.warning("lost the lease of a job; stopping it", extra={"job_id": job_id})
                self._stop(job_id, LOST)

    def _stop(self, job_id: str, reason: str) -> None:
        running = self._running.get(job_id)
        if running is not None and running.task is not None and not running.storing:
            running.task.cancel(reason)

    # --------------------------------------------------------------------- drain
    async def drain(self, timeout_s: float) -> None:
        """Stop claiming; give running jobs ``timeout_s`` to finish; hand back the rest."""
        self._claiming = False
        for event in self._room.values():
            event.set()
        for task in self._tasks[:-1]:  # the claim loops; the heartbeat renews till the end
            task.cancel()
        tasks = [r.task for r in self._running.values() if r.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        left = self.running
        for job_id in left:
            self._stop(job_id, HANDED_BACK)
        with contextlib.suppress(StoreUnavailable):
            await self.store.release(self.worker, left)
        if left:
            logger.info("handed unfinished jobs back to the queue", extra={"jobs": len(left)})
        await self.close()

    async def close(self) -> None:
        """Stop every task of the runner (without handing anything back)."""
        self._claiming = False
        running = [r.task for r in self._running.values() if r.task is not None]
        for task in self._tasks + running:
            task.cancel(HANDED_BACK)
        await asyncio.gather(*self._tasks, *running, return_exceptions=True)
        self._tasks = []
        with contextlib.suppress(StoreUnavailable):
            await self.store.withdraw(self.worker)


class StoreCheckpoint(Checkpoint):
    """A running job's checkpoints in the store, written under this worker's lease.

    A read the store cannot answer is retried for a few seconds, then taken as "none" (the
    job starts over: slower, never wrong). A write the store cannot take returns False
    (the work stops saving; it still finishes). A write refused because the lease is no
    longer this worker's stops the job, as a lost lease found by the heartbeat does.
    """

    def __init__(self, store: JobStore, job_id: str, worker: str) -> None:
        self.store = store
        self.job_id = job_id
        self.worker = worker

    async def load(self, name: str) -> bytes | None:
        delay = 0.1
        for _ in range(8):
            try:
                return await self.store.checkpoint(self.job_id, name)
            except StoreUnavailable:
                await asyncio.sleep(delay)
                delay = min(2 * delay, 2.0)
        logger.warning(
            "could not read a checkpoint; the job starts over", extra={"job_id": self.job_id}
        )
        return None

    async def save(self, name: str, data: bytes) -> bool:
        try:
            kept = await self.store.put_checkpoint(self.job_id, self.worker, name, data)
        except StoreUnavailable:
            return False
        if not kept:
            logger.warning("lost the lease of a job; stopping it", extra={"job_id": self.job_id})
            raise asyncio.CancelledError(LOST)
        return True


class _DeadlinePassed(Exception):
    """The job's deadline passed before it started."""


async def reap_forever(store: JobStore, interval_s: float) -> None:
    """Requeue jobs of dead workers and forget expired ones, every ``interval_s``."""
    while True:
        try:
            requeued = await store.reap()
            if requeued:
                logger.info("requeued jobs whose worker was lost", extra={"jobs": requeued})
        except StoreUnavailable:
            pass
        except Exception:
            logger.exception("reaping jobs failed")
        await asyncio.sleep(interval_s)


def _decode_and_trim(payload: bytes) -> Work:
    """The payload's work; then the decode's freed memory goes back (its PNGs are
    decoded through Pillow copies larger than their pixels; a print's photo stored
    before it travelled as uploaded was one)."""
    work = work_from_payload(payload)
    return_freed_memory()
    return work

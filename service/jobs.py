"""Asynchronous jobs: a request answered 202 at once, then polled, streamed or cancelled.

``POST /v1/generate`` and ``POST /v1/stylize`` with ``Prefer: respond-async`` validate
as usual, then hand their work to :meth:`JobStore.create` instead of awaiting it. A job
runs as an asyncio task over the same worker pools as the synchronous routes; its
progress comes from the batcher's step control (``on_progress``), so it moves one
sampler step or AdaIN pass at a time.

Limits (``service.config.Settings``):

* ``max_jobs``: jobs held at once (queued, running, or finished and not yet expired).
  When full, the oldest finished job is forgotten first; if every slot holds unfinished
  work, :meth:`JobStore.create` raises ``Overloaded`` (429).
* ``job_ttl_s``: a finished job (and its result) is kept this long after it ended.
* ``job_results_max_bytes``: all results held, in bytes. A new result past it pushes out
  the oldest finished jobs; a single result larger than it fails its job.
* ``job_timeout_s``: a job's deadline, from its creation (then it fails with 504's code).

States: ``queued`` -> ``running`` (first step started) -> ``succeeded`` | ``failed`` |
``cancelled``. ``DELETE`` cancels the task: the job's items leave their queue, or their
running batch at the next step.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from service.errors import Overloaded, ServiceError

logger = logging.getLogger("atelier.jobs")

FINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})


@dataclass
class JobResult:
    """What a finished job hands back: encoded images and the parameters they were made with.

    ``fields`` go into the job's ``result`` as they are (e.g. ``seeds``); ``images`` are
    encoded bytes of ``media_type``, sent base64-encoded.
    """

    images: list[bytes]
    media_type: str
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(len(image) for image in self.images)

    def as_dict(self) -> dict[str, Any]:
        return {
            "media_type": self.media_type,
            "images": [base64.b64encode(image).decode("ascii") for image in self.images],
            **self.fields,
        }


class Progress:
    """Step progress of a job made of ``parts`` batcher items (e.g. one per image).

    Parts report ``(done, total)`` from the worker thread; the job's progress is the
    slowest part's: ``step`` of ``total``.
    """

    def __init__(self, parts: int, unit: str, notify: Callable[[], None]) -> None:
        self.unit = unit
        self._done = [0] * parts
        self._total = 0
        self._notify = notify

    def reporter(self, part: int) -> Callable[[int, int], None]:
        def report(done: int, total: int) -> None:  # worker thread
            self._done[part] = done
            self._total = total
            self._notify()

        return report

    @property
    def started(self) -> bool:
        return self._total > 0

    def as_dict(self) -> dict[str, Any]:
        step = min(self._done) if self._done else 0
        fraction = step / self._total if self._total else 0.0
        return {"unit": self.unit, "step": step, "total": self._total, "fraction": fraction}


#: The work of a job: given the progress reporter of each part, produce the result.
JobWork = Callable[[Progress], Awaitable[JobResult]]


class Job:
    """One asynchronous job: state, progress, timings, and its result or error."""

    def __init__(self, kind: str, parts: int, unit: str, parameters: dict[str, Any]) -> None:
        self.id = uuid.uuid4().hex
        self.kind = kind
        self.parameters = parameters
        self.state = "queued"
        self.created_at = time.time()
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.result: JobResult | None = None
        self.error: dict[str, str] | None = None
        self.task: asyncio.Task | None = None
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self.version = 0
        self.progress = Progress(parts, unit, self._notify_threadsafe)

    # -- change notification (SSE) ----------------------------------------------------
    def _notify_threadsafe(self) -> None:
        self._loop.call_soon_threadsafe(self.touch)

    def touch(self) -> None:
        """Something changed: wake everyone waiting in :meth:`wait_change`."""
        if self.state == "queued" and self.progress.started:
            self.state, self.started_at = "running", time.time()
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self, seen: int, timeout: float) -> bool:
        """Wait until ``version`` passes ``seen`` (True) or ``timeout`` seconds (False)."""
        if self.version != seen:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)
        return self.version != seen

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    def finish(self, state: str, *, result: JobResult | None = None, error=None) -> None:
        self.state, self.result, self.error = state, result, error
        self.finished_at = time.time()
        self.touch()

    def as_dict(self, *, with_result: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "state": self.state,
            "progress": self.progress.as_dict(),
            "parameters": self.parameters,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "queued_s": _span(self.created_at, self.started_at or self.finished_at),
            "running_s": _span(self.started_at, self.finished_at),
            "error": self.error,
        }
        if with_result:
            body["result"] = self.result.as_dict() if self.result is not None else None
        return body


def _span(start: float | None, end: float | None) -> float | None:
    if start is None:
        return None
    return round((end if end is not None else time.time()) - start, 4)


class JobStore:
    """The jobs of one app, bounded in number, lifetime and result bytes."""

    def __init__(
        self,
        *,
        max_jobs: int,
        ttl_s: float,
        results_max_bytes: int,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_jobs = max_jobs
        self.ttl_s = ttl_s
        self.results_max_bytes = results_max_bytes
        self.timeout_s = timeout_s
        self._clock = clock
        self._jobs: dict[str, Job] = {}  # insertion order: oldest first
        self._ended: dict[str, float] = {}  # job id -> clock() when it finished

    @property
    def result_bytes(self) -> int:
        return sum(job.result.size for job in self._jobs.values() if job.result is not None)

    def __len__(self) -> int:
        self._expire()
        return len(self._jobs)

    def get(self, job_id: str) -> Job | None:
        self._expire()
        return self._jobs.get(job_id)

    def create(
        self, kind: str, *, parts: int, unit: str, parameters: dict[str, Any], work: JobWork
    ) -> Job:
        """Register a job and start ``work`` as its task.

        Raises:
            Overloaded: ``max_jobs`` jobs are unfinished (429 with ``Retry-After``).
        """
        self._expire()
        while len(self._jobs) >= self.max_jobs and self._forget_oldest_finished():
            pass
        if len(self._jobs) >= self.max_jobs:
            raise Overloaded(
                f"too many jobs: {self.max_jobs} are queued or running (max_jobs)",
                retry_after_s=5.0,
            )
        job = Job(kind, parts, unit, parameters)
        self._jobs[job.id] = job
        job.task = asyncio.get_running_loop().create_task(self._run(job, work))
        return job

    def cancel(self, job: Job) -> None:
        """Stop ``job``: out of the queue, or out of its batch at the next step."""
        if not job.finished and job.task is not None:
            job.task.cancel()

    async def close(self) -> None:
        """Cancel every unfinished job and wait for the tasks to end."""
        tasks = [job.task for job in self._jobs.values() if job.task and not job.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- internals ----------------------------------------------------------------------
    async def _run(self, job: Job, work: JobWork) -> None:
        try:
            result = await asyncio.wait_for(work(job.progress), self.timeout_s)
        except asyncio.CancelledError:
            job.finish("cancelled", error={"code": "cancelled", "message": "cancelled"})
        except TimeoutError:
            message = f"not finished within job_timeout_s = {self.timeout_s:g} s"
            job.finish("failed", error={"code": "deadline_exceeded", "message": message})
        except ServiceError as exc:
            job.finish("failed", error={"code": exc.code, "message": exc.message})
        except Exception:
            logger.exception("job failed", extra={"job_id": job.id, "kind": job.kind})
            job.finish("failed", error={"code": "internal_error", "message": "internal error"})
        else:
            self._store(job, result)
        self._ended[job.id] = self._clock()

    def _store(self, job: Job, result: JobResult) -> None:
        if result.size > self.results_max_bytes:
            message = (
                f"the result is {result.size} bytes, over job_results_max_bytes = "
                f"{self.results_max_bytes}"
            )
            job.finish("failed", error={"code": "result_too_large", "message": message})
            return
        while self.result_bytes + result.size > self.results_max_bytes:
            if not self._forget_oldest_finished():
                break
        job.finish("succeeded", result=result)

    def _forget_oldest_finished(self) -> bool:
        for job_id, job in self._jobs.items():
            if job.finished:
                del self._jobs[job_id]
                self._ended.pop(job_id, None)
                return True
        return False

    def _expire(self) -> None:
        now = self._clock()
        for job_id in [i for i, ended in self._ended.items() if now - ended >= self.ttl_s]:
            self._jobs.pop(job_id, None)
            del self._ended[job_id]

"""What both job store back ends share, written once.

The SQLite and the Redis back ends keep the same data under the same rules; what differs
is where a rule runs (SQL in one transaction on the store's thread, or Lua in one script
on the Redis server). What can run in Python is here: the bounds and the admission rule
with its refusals, the values a store takes and hands out (:class:`Submission`,
:class:`Outcome`, :class:`Claim`, :class:`Delivery`), the errors a job ends with, and the
small rules both apply (a job's expiry, a lease taken, which webhook events a job wants,
the rate limiter's arithmetic). Where a rule must run inside a Lua script, the script
says which function here it mirrors.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from service.errors import (
    Conflict,
    DeadlineExceeded,
    JobCancelled,
    Overloaded,
    ValidationFailed,
    WorkerLost,
)
from service.jobs.records import RUNNING, JobRecord, Packed
from service.priorities import ASYNC_PRIORITIES, BACKGROUND

#: The size a result (or checkpoint) read is given time for (a print-size PNG is tens
#: of MB): the breaker's timeout grows with the bytes a call moves.
RESULT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class StoreLimits:
    """The bounds every store enforces (``service.config.Settings`` fills them)."""

    max_jobs: int = 256
    inputs_max_bytes: int = 512 * 1024 * 1024
    results_max_bytes: int = 256 * 1024 * 1024
    ttl_s: float = 3600.0
    max_attempts: int = 3
    idempotency_ttl_s: float = 24 * 3600.0

    def expired(self, finished_at: float | None, now: float) -> bool:
        """Whether a job that finished at ``finished_at`` is past its lifetime (it reads
        as gone from then on, before the reaper deletes it)."""
        return finished_at is not None and finished_at + self.ttl_s <= now


# --------------------------------------------------------------------- admission
class Refused(Overloaded):
    """Admission refused (429): a limit is full. ``limit`` names the setting."""

    def __init__(self, message: str, *, limit: str, retry_after_s: float = 5.0) -> None:
        super().__init__(message, retry_after_s=retry_after_s)
        self.limit = limit


@dataclass(frozen=True)
class Occupancy:
    """What admission reads: the unfinished background jobs of the owner and of everyone,
    and the bytes of the unfinished jobs' inputs."""

    mine: int
    everyone: int
    input_bytes: int


def refusal(limits: StoreLimits, limit: str, count: int) -> Refused:
    """The refusal for the full ``limit`` (``count``: what the owner holds of it)."""
    messages = {
        "key_max_jobs": f"this key has {count} unfinished jobs, its limit (max_jobs of the key)",
        "max_jobs": f"too many jobs: {limits.max_jobs} are queued or running (max_jobs)",
        "job_inputs_max_bytes": f"the queued inputs would pass {limits.inputs_max_bytes} "
        "bytes (job_inputs_max_bytes)",
    }
    return Refused(messages[limit], limit=limit)


def admit(
    limits: StoreLimits,
    held: Occupancy,
    owner_max_jobs: int,
    *,
    priority: str = BACKGROUND,
    size: int | None = None,
) -> None:
    """Refuse a job the store has no room for (the Lua of ``redis_store.queue``'s create
    mirrors it). Interactive jobs are bounded by their deadline, not by the job counts.

    Args:
        size: the job's input bytes; ``None`` for the early check, before the input is
            decoded (then inputs already at their bound refuse).

    Raises:
        Refused: the owner's or everyone's unfinished jobs, or the queued inputs, are full.
    """
    counted = priority in ASYNC_PRIORITIES
    if counted and held.mine >= owner_max_jobs:
        raise refusal(limits, "key_max_jobs", held.mine)
    if counted and held.everyone >= limits.max_jobs:
        raise refusal(limits, "max_jobs", held.everyone)
    bound = limits.inputs_max_bytes
    full = (held.input_bytes >= bound) if size is None else (held.input_bytes + size > bound)
    if full:
        raise refusal(limits, "job_inputs_max_bytes", held.input_bytes)


class IdempotencyKeyReused(ValidationFailed):
    """The idempotency key was used before for a different request (422)."""

    code = "idempotency_key_reused"

    def __init__(
        self,
        message: str = "Idempotency-Key: this key was used for a different request; use a new key",
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)


class IdempotentJobExpired(Conflict):
    """The idempotency key's job ended and was forgotten, past ``ttl_s`` (409)."""

    code = "idempotent_result_gone"

    def __init__(
        self,
        message: str = "Idempotency-Key: the first request's job finished and was forgotten "
        "(job_ttl_s); its answer is no longer held",
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)


# ------------------------------------------------------------ what a store takes
def wants_webhook(webhook: dict[str, Any] | None, event: str) -> bool:
    """Whether a job's ``webhook`` asks for ``event`` ("completed", "progress")."""
    if not webhook:
        return False
    return event in webhook["events"]


@dataclass(frozen=True)
class Submission:
    """A job to store: :meth:`JobQueue.create`'s arguments, its record stamped with the
    input's size and the idempotency key.

    ``idempotency``: ``(key, fingerprint)``; ``run_by``: ``(worker, lease_s)`` when a
    worker of the creating process holds the job at once.
    """

    record: JobRecord
    payload: bytes
    owner_max_jobs: int
    idempotency: tuple[str, str] | None = None
    run_by: tuple[str, float] | None = None

    def wants(self, event: str) -> bool:
        return wants_webhook(self.record.webhook, event)


@dataclass(frozen=True)
class Outcome:
    """How a job ends: its final state, the result of a success or the error of a
    failure, and its last ``(step, total)`` (written with it)."""

    state: str
    result: Packed | None = None
    error: dict[str, str] | None = None
    progress: tuple[int, int] | None = None


def lease_to(record: JobRecord, worker: str, now: float) -> None:
    """``record`` as ``worker`` holds it from ``now``: running, one attempt more, started
    at its first lease (a claim, or a create that a worker of its process runs)."""
    record.state, record.worker = RUNNING, worker
    record.attempts += 1
    record.started_at = record.started_at or now


def cancelled_error() -> dict[str, str]:
    """The error of a job cancelled before it ended."""
    return JobCancelled("cancelled").as_dict()


def late_error() -> dict[str, str]:
    """The error of a queued job whose deadline passed before a worker took it."""
    return DeadlineExceeded("its deadline passed in the queue").as_dict()


def lost_error(attempts: int | str) -> dict[str, str]:
    """The error of a job whose worker was lost ``max_attempts`` times."""
    message = f"its worker was lost {attempts} times (max_attempts); it is not tried again"
    return WorkerLost(message).as_dict()


# ------------------------------------------------------------ what a store hands out
@dataclass(frozen=True)
class Claim:
    """A job a worker now holds the lease of, with its input; ``more``: whether jobs of
    its model (of any priority and owner) were still queued after it was taken, so that
    another claim may find one (when not, the worker waits for the model's work topic,
    which every queued job announces, instead of asking again)."""

    record: JobRecord
    payload: bytes
    more: bool
    #: (a back end's own, before it hands the claim out) the file its input is still in
    input_file: Any = None


@dataclass(frozen=True)
class Delivery:
    """A job whose webhook delivery a dispatcher took, hidden from others until ``lease``
    (the store's clock); pass ``lease`` back to :meth:`WebhookOutbox.update_webhook`."""

    record: JobRecord
    lease: float


# ------------------------------------------------------------------- rate limits
def gcra(tat: float | None, now: float, rate_per_s: float, burst: float) -> tuple[float, float]:
    """One request against a GCRA token bucket (the Lua of ``redis_store.tokens`` mirrors
    it): ``(wait, next_tat)``, where ``tat`` is the stored theoretical arrival time (None:
    none yet). ``wait`` 0: allowed, and ``next_tat`` is the one to store; else the seconds
    until a request would be, and nothing is stored."""
    interval = 1.0 / rate_per_s
    tat = max(now if tat is None else tat, now)
    wait = tat + interval - now - burst * interval
    return (wait if wait > 0 else 0.0), tat + interval


# -------------------------------------------------------------------------- tasks
#: How often :func:`stop_task` cancels again a task that is still running.
RECANCEL_S = 0.05


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task and wait until it has ended (``None``: nothing); an
    exception it ended with is raised here.

    The cancel is repeated every :data:`RECANCEL_S` while the task runs on: a library
    it awaits can swallow one. Python 3.11's ``asyncio.wait_for`` returns the awaited
    result when the cancel lands in the loop turn that result arrives (fixed in 3.12,
    gh-86296), and redis-py sends every command through it: the Redis store's change
    listener, cancelled as its ``SUBSCRIBE`` was sent, went on listening, and the
    store's ``close`` waited for it for ever. The caller's own cancellation is raised,
    not taken for the task's.
    """
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_S)
    if not task.cancelled():
        task.result()

"""The job store: one interface, two backends (SQLite on one host, Redis across hosts).

A store keeps jobs (``service.jobs.records``) and the queue they wait in. The API side
creates, reads, cancels and deletes jobs; the worker side claims them under a lease,
reports progress, and finishes them. Both backends give the same guarantees:

* **Durable**: an accepted job (its record and input) is written before the 202; it
  survives a restart or a crash of any process (SQLite: a WAL database file; Redis:
  the server, with append-only persistence in the shipped deployments).
* **At-least-once**: a claimed job is leased for ``lease_s`` and the worker renews the
  lease while it runs. A lease that runs out (the worker died) puts the job back at the
  head of its owner's queue, up to ``max_attempts`` claims; a draining worker hands its
  unfinished jobs back at once. The work is deterministic for its seed, so a rerun
  makes the same images.
* **Written once**: :meth:`JobStore.finish` only moves a job that is not yet final; a
  second finish (a rerun that also completed) changes nothing.
* **Fair**: :meth:`JobStore.claim` takes interactive work first, then, among the owners
  with queued jobs, the one served least recently (its oldest job): one owner's backlog
  delays another owner's job by about one claim.
* **Bounded**: unfinished jobs in all (``max_jobs``) and per owner, bytes of queued
  inputs (``inputs_max_bytes``) and of held results (``results_max_bytes``, oldest
  finished jobs dropped first), and a finished job's lifetime (``ttl_s``). Admission
  refuses with :class:`Refused` (429) before anything is stored.
* **Idempotent submits**: a create with an idempotency key and the request's
  fingerprint returns the job the same key made before (within
  ``idempotency_ttl_s``), or raises :class:`IdempotencyKeyReused` for another request.

Change notification: a store calls ``hub.notify(topic)`` for every change it makes or
hears of (topics from :func:`job_topic`, :func:`cancel_topic`, :func:`done_topic`,
:func:`work_topic`; a change this process made is announced here at once, without
waiting for the store's own broadcast, and a job it finished with ``hub.finished``,
which hands the result it wrote to the waiters here), so waiters (event streams,
synchronous requests, workers) wake without polling; waiters still re-read after a
timeout, so a lost notification costs latency, never correctness.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from service.errors import (
    Conflict,
    DeadlineExceeded,
    JobCancelled,
    Overloaded,
    StoreFull,
    StoreUnavailable,
    ValidationFailed,
    WorkerLost,
)
from service.jobs.breaker import Breaker
from service.jobs.records import JobRecord

__all__ = [
    "StoreFull",
    "StoreUnavailable",
]  # the store's errors are the service's own (503 and more)


@dataclass(frozen=True)
class StoreLimits:
    """The bounds every store enforces (``service.config.Settings`` fills them)."""

    max_jobs: int = 256
    inputs_max_bytes: int = 512 * 1024 * 1024
    results_max_bytes: int = 256 * 1024 * 1024
    ttl_s: float = 3600.0
    max_attempts: int = 3
    idempotency_ttl_s: float = 24 * 3600.0


@dataclass(frozen=True)
class Delivery:
    """A job whose webhook delivery a dispatcher took, hidden from others until ``lease``
    (the store's clock); pass ``lease`` back to :meth:`JobStore.update_webhook`."""

    record: JobRecord
    lease: float


@dataclass(frozen=True)
class Claim:
    """A job a worker now holds the lease of, with its input; ``more``: whether jobs of
    its model (of any priority and owner) were still queued after it was taken, so that
    another claim may find one (when not, the worker waits for the model's work topic,
    which every queued job announces, instead of asking again)."""

    record: JobRecord
    payload: bytes
    more: bool


class Refused(Overloaded):
    """Admission refused (429): a limit is full. ``limit`` names the setting."""

    def __init__(self, message: str, *, limit: str, retry_after_s: float = 5.0) -> None:
        super().__init__(message, retry_after_s=retry_after_s)
        self.limit = limit


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


def job_topic(job_id: str) -> str:
    return f"job:{job_id}"


def cancel_topic(job_id: str) -> str:
    return f"cancel:{job_id}"


def done_topic(job_id: str) -> str:
    """Announced once, when the job reaches a final state."""
    return f"done:{job_id}"


def work_topic(model: str) -> str:
    return f"work:{model}"


class Watch:
    """A registration for one topic's changes; made before reading, so none is missed.

    ``result``: on a job's done topic, the result this process wrote when it finished
    the job (see :meth:`ChangeHub.finished`), so its waiter here need not read it back.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.result: bytes | None = None

    def _set(self) -> None:
        self._event.set()

    async def wait(self, timeout: float | None) -> bool:
        """Wait for a change since the last wait (True) or ``timeout`` seconds (False)."""
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self._event.clear()


class ChangeHub:
    """In-process fan-out of change notifications by topic (event loop only)."""

    def __init__(self) -> None:
        self._watches: dict[str, set[Watch]] = defaultdict(set)

    @contextlib.contextmanager
    def watch(self, *topics: str) -> Iterator[Watch]:
        """Register for ``topics`` for the duration of the block."""
        watch = Watch()
        for topic in topics:
            self._watches[topic].add(watch)
        try:
            yield watch
        finally:
            for topic in topics:
                watchers = self._watches.get(topic)
                if watchers is not None:
                    watchers.discard(watch)
                    if not watchers:
                        del self._watches[topic]

    def notify(self, topic: str) -> None:
        for watch in self._watches.get(topic, ()):
            watch._set()

    def finished(self, job_id: str, result: bytes | None) -> None:
        """This process moved ``job_id`` to a final state (its job and done topics);
        ``result``: the result it wrote, for the done topic's watchers (the same bytes
        the store holds: a job's outcome is written once)."""
        self.notify(job_topic(job_id))
        for watch in self._watches.get(done_topic(job_id), ()):
            watch.result = result
            watch._set()

    def notify_all(self) -> None:
        """Something changed that this process did not see (another process wrote)."""
        for watchers in self._watches.values():
            for watch in watchers:
                watch._set()

    def watched(self, prefix: str) -> list[str]:
        """The topics with a watcher that start with ``prefix``."""
        return [topic for topic in self._watches if topic.startswith(prefix)]


class JobStore(ABC):
    """Where jobs live. See the module docstring for the guarantees."""

    #: whether processes on other hosts can share this store (the API and worker tiers
    #: apart, several replicas behind a balancer)
    shared: bool = False

    #: what messages call this store
    name = "the job store"

    def __init__(
        self,
        limits: StoreLimits,
        hub: ChangeHub | None = None,
        *,
        call_timeout_s: float = 1.0,
        probe_interval_s: float = 0.5,
    ) -> None:
        self.limits = limits
        self.hub = hub or ChangeHub()
        self.breaker = Breaker(
            self.name,
            self._probe,
            call_timeout_s=call_timeout_s,
            probe_interval_s=probe_interval_s,
        )

    @abstractmethod
    async def _probe(self) -> None:
        """The cheapest round trip to the store, outside the breaker (raises when it
        does not answer)."""

    @abstractmethod
    async def start(self) -> None:
        """Connect and start background listeners."""

    @abstractmethod
    async def close(self) -> None:
        """Stop listeners and disconnect."""

    @abstractmethod
    async def now(self) -> float:
        """The store's clock (Unix seconds): leases, deadlines and due times are on it."""

    # ------------------------------------------------------------------- API side
    @abstractmethod
    async def check_admission(self, owner: str, owner_max_jobs: int) -> None:
        """Refuse early (before a request's uploads are decoded) when ``owner`` or the
        service has no room for another job.

        Raises:
            Refused: a limit is full.
        """

    @abstractmethod
    async def create(
        self,
        record: JobRecord,
        payload: bytes,
        *,
        owner_max_jobs: int,
        idempotency: tuple[str, str] | None = None,
        run_by: tuple[str, float] | None = None,
    ) -> tuple[JobRecord, bool]:
        """Store ``record`` and its input and queue it, atomically with the admission
        checks. Interactive jobs are bounded by their deadline, not by the job counts.

        Args:
            idempotency: ``(key, fingerprint)``: the same key with the same fingerprint
                returns the job made before instead of a new one.
            run_by: ``(worker, lease_s)``: the new job does not queue; ``worker`` (of
                the calling process, which has room for it) holds it at once, leased
                for ``lease_s``, as if it had claimed it (the returned record is
                running). An idempotent replay is returned as it is.

        Returns:
            ``(job, created)``: ``created`` is False for an idempotent replay.

        Raises:
            Refused: a limit is full.
            IdempotencyKeyReused: the key was used for a different request.
            IdempotentJobExpired: the key's job is gone (finished and expired).
        """

    @abstractmethod
    async def get(self, job_id: str) -> JobRecord | None:
        """The job, or ``None`` when unknown or expired."""

    @abstractmethod
    async def result(self, job_id: str) -> bytes | None:
        """The job's packed result (``JobResult.to_bytes``), once it succeeded."""

    @abstractmethod
    async def cancel(self, job_id: str) -> JobRecord | None:
        """A queued job is cancelled at once; a running one is asked to stop (its worker
        hears of it and stops at the next step). Returns the job as it is now."""

    @abstractmethod
    async def delete(self, job_id: str) -> bool:
        """Forget a finished job and its result (False when unknown or unfinished)."""

    @abstractmethod
    async def jobs_of(self, owner: str, limit: int) -> list[JobRecord]:
        """The owner's most recent jobs, newest first."""

    @abstractmethod
    async def take_token(self, owner: str, rate_per_s: float, burst: float) -> float:
        """One request of ``owner`` against its rate (a GCRA token bucket shared by every
        process on the store): 0 when allowed, else the seconds until one would be."""

    # ---------------------------------------------------------------- worker side
    @abstractmethod
    async def claim(
        self,
        worker: str,
        model: str,
        priorities: tuple[str, ...],
        lease_s: float,
        *,
        skip_owners: frozenset[str] = frozenset(),
    ) -> Claim | None:
        """Take the next job of ``model`` for ``worker`` (interactive first, then the
        owner served least recently, leaving out ``skip_owners``) and lease it for
        ``lease_s``."""

    @abstractmethod
    async def renew(
        self, worker: str, job_ids: list[str], lease_s: float
    ) -> tuple[set[str], set[str]]:
        """Extend the leases of ``worker``'s running jobs.

        Returns:
            ``(cancel_requested, lost)``: jobs asked to stop, and jobs no longer this
            worker's (their lease ran out and they went back, or they were finished).
        """

    @abstractmethod
    async def set_progress(self, job_id: str, worker: str, step: int, total: int) -> None:
        """Record how far a running job got (only while ``worker`` holds it)."""

    @abstractmethod
    async def put_checkpoint(self, job_id: str, worker: str, name: str, data: bytes) -> bool:
        """Keep ``data`` under ``name`` for the job (replacing an older value of that name),
        only while ``worker`` holds the job's lease and the job is not final: returns False
        (and writes nothing) otherwise. Checkpoints are forgotten with the job (delete,
        expiry, and when it reaches a final state: a finished job needs none).

        A long job saves its finished pieces here (a chunk of a video's frames), so that
        the next worker to claim it after its worker was lost (a lease that ran out puts
        the job back with its checkpoints) resumes from them; every process that shares
        the store reads them. "Holds" is judged as :meth:`set_progress` and
        :meth:`renew` judge it: the job is running under ``worker``. The bytes are not
        counted against the store's byte limits (``inputs_max_bytes``,
        ``results_max_bytes``): a job's checkpoints are bounded by its own result, and
        are dropped when it ends."""

    @abstractmethod
    async def checkpoint(self, job_id: str, name: str) -> bytes | None:
        """The job's checkpoint ``name``, or None."""

    @abstractmethod
    async def finish(
        self,
        job_id: str,
        state: str,
        *,
        result: bytes | None = None,
        error: dict[str, str] | None = None,
        progress: tuple[int, int] | None = None,
    ) -> bool:
        """Move a job to a final state with its result or error (False: it was final).

        ``progress``: the job's last ``(step, total)``, written with the outcome (a job
        shorter than the progress interval wrote none before); a success then shows
        ``step = total``."""

    @abstractmethod
    async def release(self, worker: str, job_ids: list[str]) -> None:
        """Hand jobs back to the queue (a draining worker): they run again elsewhere."""

    @abstractmethod
    async def reap(self) -> int:
        """Requeue jobs whose lease ran out (or fail them past ``max_attempts``), fail
        queued jobs past their deadline, forget expired jobs. Returns jobs requeued."""

    @abstractmethod
    async def publish_models(self, worker: str, models: dict[str, Any], ttl_s: float) -> None:
        """Advertise the models ``worker`` serves (and their details) for ``ttl_s``."""

    @abstractmethod
    async def withdraw(self, worker: str) -> None:
        """Stop advertising ``worker`` (it is leaving)."""

    @abstractmethod
    async def models(self) -> dict[str, tuple[dict[str, Any], bool]]:
        """Every model a worker ever advertised: ``{name: (details, served now)}``."""

    @abstractmethod
    async def queue_depths(self) -> dict[str, int]:
        """Queued jobs per model (what autoscalers read)."""

    # ------------------------------------------------------------------ webhooks
    @abstractmethod
    async def due_webhooks(self, lease_s: float, limit: int) -> list[Delivery]:
        """Jobs with a webhook delivery due now, each hidden from other dispatchers for
        ``lease_s`` (a visibility timeout: a dispatcher that dies lets it come back)."""

    @abstractmethod
    async def update_webhook(
        self, job_id: str, webhook: dict[str, Any], due_at: float | None, *, lease: float
    ) -> None:
        """Record a delivery's outcome and when the next attempt is due (None: none).

        The due time changes only if it is still ``lease`` (the one :meth:`due_webhooks`
        set): an event that fell due meanwhile (the job finished while its progress was
        being delivered) keeps its own due time."""

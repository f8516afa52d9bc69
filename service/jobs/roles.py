"""The job store's four roles, and the connection they stand on.

A store is one back end (SQLite, Redis) playing four roles, each an interface here:

* :class:`JobQueue`: the jobs, their inputs and results, and the queue they wait in;
* :class:`RateLimits`: each owner's request tokens;
* :class:`ModelDirectory`: which models the live workers serve;
* :class:`WebhookOutbox`: the webhook deliveries the jobs' changes make due.

All four stand on a :class:`Backend`: the connection, the bounds, the change hub, the
breaker and the store's clock. ``service.jobs.store.JobStore`` is the four together; a
caller that needs one role takes that role. Each back end implements each role in a
module of its own (``sqlite_store/``, ``redis_store/``: ``queue``, ``tokens``,
``directory``, ``outbox`` on their ``connection``).

What every back end does the same is written here once, around the back end's own
step: a role's public method stamps what it is given, calls the back end's step (the
abstract ``_create``, ``_claim``, ``_finish`` ...: one transaction, or one script) and
announces the change on this process's hub (a change this process made is announced
here at once, without waiting for the store's own broadcast). A method with nothing
to share (``get``, ``reap`` ...) is the back end's alone. The values and rules the
steps share are in ``service.jobs.shared``.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, TypedDict

from service.jobs.breaker import Breaker
from service.jobs.changes import ChangeHub, cancel_topic, done_topic, job_topic, work_topic
from service.jobs.records import JobRecord, Packed
from service.jobs.shared import (
    Claim,
    Delivery,
    Occupancy,
    Outcome,
    StoreLimits,
    Submission,
    admit,
    stop_task,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from service.jobs.blobs import PackedSource


class BackendOptions(TypedDict, total=False):
    """The options every back end takes (after its own), passed on to :class:`Backend`:

    * ``webhook_progress_interval_s``: the least time between two progress webhooks of
      a job (5 s);
    * ``call_timeout_s``: a call's time before the store counts as stalled (1 s);
    * ``probe_interval_s``: time between two probes of a stalled store (0.5 s).
    """

    webhook_progress_interval_s: float
    call_timeout_s: float
    probe_interval_s: float


class Backend(ABC):
    """One connection to a store, shared by the roles that a back end plays on it.

    Every call goes through the :class:`~service.jobs.breaker.Breaker`: a store that does
    not answer within ``call_timeout_s`` (more for a large payload) is
    ``StoreUnavailable`` (503) at once until a probe gets an answer. ``start`` connects
    and starts hearing the changes other processes make (forwarded to ``hub``); times
    are on the store's clock (:meth:`now`).
    """

    #: whether processes on other hosts can share this store (the API and worker tiers
    #: apart, several replicas behind a balancer)
    shared: bool = False

    #: what messages call this store
    name = "the job store"

    def __init__(
        self, limits: StoreLimits, hub: ChangeHub | None = None, **options: Unpack[BackendOptions]
    ) -> None:
        self.limits = limits
        self.hub = hub or ChangeHub()
        self.webhook_progress_interval_s = options.get("webhook_progress_interval_s", 5.0)
        self.breaker = Breaker(
            self.name,
            self._probe,
            call_timeout_s=options.get("call_timeout_s", 1.0),
            probe_interval_s=options.get("probe_interval_s", 0.5),
        )
        self._hearing: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect, and start hearing the changes of other processes."""
        await self._open()
        self._hearing = asyncio.get_running_loop().create_task(self._hear_others())

    async def close(self) -> None:
        """Stop hearing, and disconnect."""
        await stop_task(self._hearing)
        await self.breaker.close()
        await self._shut()

    @abstractmethod
    async def now(self) -> float:
        """The store's clock (Unix seconds): leases, deadlines and due times are on it."""

    @abstractmethod
    async def _open(self) -> None:
        """Connect (or make ready to)."""

    @abstractmethod
    async def _hear_others(self) -> None:
        """Until cancelled: wake the hub's waiters for every change another process
        makes (every waiter when it cannot tell which)."""

    @abstractmethod
    async def _shut(self) -> None:
        """Disconnect."""

    @abstractmethod
    async def _probe(self) -> None:
        """The cheapest round trip to the store, outside the breaker (raises when it
        does not answer)."""


class JobQueue(Backend):
    """The jobs (``service.jobs.records``) and the queue they wait in.

    The API side creates, reads, cancels and deletes jobs; the worker side claims them
    under a lease, reports progress, and finishes them. Every back end guarantees:

    * **Durable**: an accepted job (its record and input) is written before the 202; it
      survives a restart or a crash of any process (SQLite: a WAL database file; Redis:
      the server, with append-only persistence in the shipped deployments).
    * **At-least-once**: a claimed job is leased for ``lease_s`` and the worker renews
      the lease while it runs. A lease that runs out (the worker died) puts the job back
      at the head of its owner's queue, up to ``max_attempts`` claims; a draining worker
      hands its unfinished jobs back at once. The work is deterministic for its seed, so
      a rerun makes the same images.
    * **Written once**: :meth:`finish` only moves a job that is not yet final; a second
      finish (a rerun that also completed) changes nothing.
    * **Fair**: :meth:`claim` takes interactive work first, then, among the owners with
      queued jobs, the one served least recently (its oldest job): one owner's backlog
      delays another owner's job by about one claim.
    * **Bounded**: unfinished jobs in all (``max_jobs``) and per owner, bytes of queued
      inputs (``inputs_max_bytes``) and of held results (``results_max_bytes``, oldest
      finished jobs dropped first), and a finished job's lifetime (``ttl_s``). Admission
      refuses with :class:`~service.jobs.shared.Refused` (429) before anything is stored
      (the rule: :func:`~service.jobs.shared.admit`).
    * **Idempotent submits**: a create with an idempotency key and the request's
      fingerprint returns the job the same key made before (within
      ``idempotency_ttl_s``), or raises ``IdempotencyKeyReused`` for another request.
    """

    # ------------------------------------------------------------------- API side
    async def check_admission(self, owner: str, owner_max_jobs: int) -> None:
        """Refuse early (before a request's uploads are decoded) when ``owner`` or the
        service has no room for another job.

        Raises:
            Refused: a limit is full.
        """
        admit(self.limits, await self._occupancy(owner), owner_max_jobs)

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
        record.input_bytes = len(payload)
        record.idempotency_key = idempotency[0] if idempotency else None
        job, created = await self._create(
            Submission(record, payload, owner_max_jobs, idempotency, run_by)
        )
        if created and run_by is None:
            self.hub.notify(work_topic(job.model))  # this process's workers, at once
        return job, created

    @abstractmethod
    async def get(self, job_id: str) -> JobRecord | None:
        """The job, or ``None`` when unknown or expired."""

    @abstractmethod
    async def result(self, job_id: str) -> bytes | None:
        """The job's packed result (``JobResult.packed``, joined), once it succeeded."""

    @abstractmethod
    async def result_source(self, job_id: str) -> PackedSource | None:
        """The job's packed result to read piece by piece (``records.read_layout``, then
        one image's bytes, without the rest), once it succeeded; ``None`` as
        :meth:`result`."""

    async def cancel(self, job_id: str) -> JobRecord | None:
        """A queued job is cancelled at once; a running one is asked to stop (its worker
        hears of it and stops at the next step). Returns the job as it is now."""
        record = await self._cancel(job_id)
        if record is not None:
            self.hub.notify(job_topic(job_id))
            self.hub.notify(cancel_topic(job_id))
            if record.finished:
                self.hub.notify(done_topic(job_id))
        return record

    @abstractmethod
    async def delete(self, job_id: str) -> bool:
        """Forget a finished job and its result (False when unknown or unfinished)."""

    @abstractmethod
    async def jobs_of(self, owner: str, limit: int) -> list[JobRecord]:
        """The owner's most recent jobs (background ones), newest first."""

    # ---------------------------------------------------------------- worker side
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
        claim = await self._claim(worker, model, priorities, lease_s, skip_owners)
        if claim is not None:
            self.hub.notify(job_topic(claim.record.id))
        return claim

    async def renew(
        self, worker: str, job_ids: list[str], lease_s: float
    ) -> tuple[set[str], set[str]]:
        """Extend the leases of ``worker``'s running jobs.

        Returns:
            ``(cancel_requested, lost)``: jobs asked to stop, and jobs no longer this
            worker's (their lease ran out and they went back, or they were finished).
        """
        if not job_ids:
            return set(), set()
        return await self._renew(worker, job_ids, lease_s)

    async def set_progress(self, job_id: str, worker: str, step: int, total: int) -> None:
        """Record how far a running job got (only while ``worker`` holds it); a job whose
        webhook wants progress has a delivery made due, at most once per
        ``webhook_progress_interval_s``."""
        await self._set_progress(job_id, worker, step, total)
        self.hub.notify(job_topic(job_id))

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

    async def finish(
        self,
        job_id: str,
        state: str,
        *,
        result: Packed | None = None,
        error: dict[str, str] | None = None,
        progress: tuple[int, int] | None = None,
    ) -> bool:
        """Move a job to a final state with its result or error (False: it was final).

        ``progress``: the job's last ``(step, total)``, written with the outcome (a job
        shorter than the progress interval wrote none before); a success then shows
        ``step = total``. A job whose webhook wants completion has a delivery made due."""
        done = await self._finish(job_id, Outcome(state, result, error, progress))
        if done:
            self.hub.finished(job_id, result)
        return done

    async def release(self, worker: str, job_ids: list[str]) -> None:
        """Hand jobs back to the queue (a draining worker): they run again elsewhere,
        this claim not counted against ``max_attempts``."""
        if job_ids:
            await self._release(worker, job_ids)
            for job_id in job_ids:
                self.hub.notify(job_topic(job_id))

    @abstractmethod
    async def reap(self) -> int:
        """Requeue jobs whose lease ran out (or fail them past ``max_attempts``), fail
        queued jobs past their deadline, forget expired jobs. Returns jobs requeued."""

    @abstractmethod
    async def queue_depths(self) -> dict[str, int]:
        """Queued jobs per model (what autoscalers read)."""

    # ------------------------------------------------------- the back end's steps
    @abstractmethod
    async def _occupancy(self, owner: str) -> Occupancy:
        """What admission reads, for ``owner``."""

    @abstractmethod
    async def _create(self, job: Submission) -> tuple[JobRecord, bool]:
        """In one step: an idempotent replay (or its refusal), else the admission
        (:func:`~service.jobs.shared.admit`), the job, its input, its webhook flags and
        its idempotency key stored, and the job queued (announced on its model's work
        topic) or held by ``job.run_by`` (the record updated as
        :func:`~service.jobs.shared.lease_to` does)."""

    @abstractmethod
    async def _cancel(self, job_id: str) -> JobRecord | None:
        """In one step: finish a queued job as cancelled, or mark a running one
        ``cancel_requested``; the job as it is then (None: unknown or expired)."""

    @abstractmethod
    async def _claim(
        self, worker: str, model: str, order: tuple[str, ...], lease_s: float, skip: frozenset[str]
    ) -> Claim | None:
        """In one step: the fair order's next job, leased (see :meth:`claim`; ``order``:
        its ``priorities``, ``skip``: its ``skip_owners``)."""

    @abstractmethod
    async def _renew(
        self, worker: str, job_ids: list[str], lease_s: float
    ) -> tuple[set[str], set[str]]:
        """See :meth:`renew` (``job_ids`` is not empty)."""

    @abstractmethod
    async def _set_progress(self, job_id: str, worker: str, step: int, total: int) -> None:
        """See :meth:`set_progress`."""

    @abstractmethod
    async def _finish(self, job_id: str, outcome: Outcome) -> bool:
        """In one step, unless the job is final or gone: its outcome, its input and
        checkpoints dropped, its completion webhook made due, its result held (the
        oldest finished jobs forgotten while the results pass ``results_max_bytes``)."""

    @abstractmethod
    async def _release(self, worker: str, job_ids: list[str]) -> None:
        """See :meth:`release` (``job_ids`` is not empty); the requeued jobs' models
        hear of their work."""


class RateLimits(Backend):
    """Each owner's request rate: a GCRA token bucket (:func:`~service.jobs.shared.gcra`)
    per owner, shared by every process on the store, and taken atomically (two
    processes never spend the same token)."""

    @abstractmethod
    async def take_token(self, owner: str, rate_per_s: float, burst: float) -> float:
        """One request of ``owner`` against its rate: 0 when allowed (the token is
        spent), else the seconds until one would be (nothing is spent)."""


class ModelDirectory(Backend):
    """Which models the live workers on the store serve, and every model's details.

    A worker advertises its models for a time to live and renews the advertisement
    while it runs; one that stops renewing (it died) drops out when the time runs out
    (its entry is pruned at a later advertisement), one that leaves withdraws at once.
    A model's details outlive its workers (a model served before is known, not served).
    """

    @abstractmethod
    async def publish_models(self, worker: str, models: dict[str, Any], ttl_s: float) -> None:
        """Advertise the models ``worker`` serves (and their details) for ``ttl_s``."""

    @abstractmethod
    async def withdraw(self, worker: str) -> None:
        """Stop advertising ``worker`` (it is leaving)."""

    @abstractmethod
    async def models(self) -> dict[str, tuple[dict[str, Any], bool]]:
        """Every model a worker ever advertised: ``{name: (details, served now)}``."""


class WebhookOutbox(Backend):
    """The webhook deliveries the jobs' changes make due: a transactional outbox.

    A delivery falls due in the same atomic step as the change it reports (a job that
    finishes, when its webhook wants completion; progress, at most once per
    ``webhook_progress_interval_s``, when it wants progress), so none is lost between
    the change and its delivery. A dispatcher takes due deliveries under a visibility
    timeout (one that dies lets them come back: at-least-once, the webhook's own record
    says which messages were delivered) and records each outcome with its next due time.
    """

    @abstractmethod
    async def due_webhooks(self, lease_s: float, limit: int) -> list[Delivery]:
        """Jobs with a webhook delivery due now, each hidden from other dispatchers for
        ``lease_s`` (a visibility timeout: a dispatcher that dies lets it come back)."""

    async def update_webhook(
        self, job_id: str, webhook: dict[str, Any], due_at: float | None, *, lease: float
    ) -> None:
        """Record a delivery's outcome and when the next attempt is due (None: none).

        The due time changes only if it is still ``lease`` (the one :meth:`due_webhooks`
        set): an event that fell due meanwhile (the job finished while its progress was
        being delivered) keeps its own due time."""
        await self._update_webhook(job_id, webhook, due_at, lease)
        self.hub.notify(job_topic(job_id))

    @abstractmethod
    async def _update_webhook(
        self, job_id: str, webhook: dict[str, Any], due_at: float | None, lease: float
    ) -> None:
        """See :meth:`update_webhook`, in one step."""

"""Where a model is served, and how a validated request's work runs there: now, as a job, or
waited for.

The work routes (``POST /v1/generate``, ``/v1/stylize``, ``/v1/images/generations``)
parse their request into a :class:`~service.execution.work.Work` and hand it to the
request's :class:`Executor` (``service.routes.deps.ExecutorDep``), which runs it as the
client asked (a :class:`Submission`):

* ``Prefer: respond-async`` (RFC 7240): a background job, stored before the route
  answers ``202 Accepted`` with it (:class:`Accepted`); long work (a video) runs only
  this way;
* an ``Idempotency-Key``, a ``webhook``, or a model this process does not load: an
  interactive job that the request waits for (a replay of the key waits for, or
  returns, the first request's job); this process's runner runs it at once when it
  has room;
* otherwise the work runs here at once on the model's interactive batcher.

The executor also owns what bounds a request's work: its deadline
(``request_timeout_s`` since it arrived; ``job_timeout_s``, or ``video_job_timeout_s``
for long work, for a background job), its key's room for background jobs
(``max_jobs``), the preparation budget it holds while its uploads are decoded (given
back as soon as the work is out of its hands: the job stored, or the run started), and
its client's leaving (the work is cancelled, 499). Interactive work goes before
background work (``service.priorities``); the key is the owner every batcher and the
job store share fairly between.

The :class:`ModelCatalog` says where the model a work asks for is served, in a :class:`Served`:

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

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

from models.devices import return_freed_memory
from models.dit.options import GenerateDefaults
from service.config import Settings
from service.errors import (
    ClientClosedRequest,
    DeadlineExceeded,
    JobNotFound,
    NotReady,
    ServiceError,
    ValidationFailed,
    error_of_job,
)
from service.execution.runner import JobRunner
from service.execution.work import RunContext, Work
from service.images import PreparationBudget
from service.jobs.records import JobRecord, JobResult, new_job_id, off_loop_if_large
from service.jobs.store import JobStore, StoreUnavailable, Watch, done_topic
from service.jobs.webhooks import WebhookPolicy, WebhookRefused, check_target, webhook_request
from service.keys import Caller
from service.priorities import BACKGROUND, BULK, INTERACTIVE, off_loop_as_bulk
from service.workers.loading import ModelStatus
from service.workers.pool import AnyWorkerPool

T = TypeVar("T")

#: Seconds between re-reads of a job whose change notification may have been missed.
REREAD_S = 1.0


# ---------------------------------------------------------------- the models
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


# ------------------------------------------------------------ the submission


def fingerprint(*parts: bytes | str) -> str:
    """The request's identity for ``Idempotency-Key``: SHA-256 over its parts."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class Submission:
    """How the client asked for its work to run."""

    respond_async: bool = False
    idempotency: tuple[str, str] | None = None  # (key, fingerprint)
    webhook: dict[str, Any] | None = None
    #: Live previews in the job's event stream (``service.jobs.previews``): the job's
    #: parameters say ``"previews": true``. Work answered at once has no stream: none.
    previews: bool = False

    @classmethod
    def of(
        cls,
        *,
        respond_async: bool,
        idempotency_key: str | None,
        identity: Sequence[bytes | str],
        webhook: dict[str, Any] | None = None,
        previews: bool = False,
    ) -> Submission:
        """The submission of a request; with an ``Idempotency-Key``, the request is
        known by the :func:`fingerprint` of ``identity`` (its route, fields, uploads;
        not ``previews``, which changes how the job is watched, not its result)."""
        idempotency = None
        if idempotency_key is not None:
            idempotency = (idempotency_key, fingerprint(*identity))
        return cls(
            respond_async=respond_async,
            idempotency=idempotency,
            webhook=webhook,
            previews=previews,
        )


@dataclass(frozen=True)
class Accepted:
    """Work taken as a background job: the job as stored (the route answers 202)."""

    job: JobRecord


def _nothing() -> None:
    pass


# eq and repr as object's: an executor is itself, and its repr shows no settings (secrets)
@dataclass(eq=False, repr=False)
class Executor:
    """Runs one request's work (see the module docstring).

    One per request (``ExecutorDep`` builds it): it is handed the app's parts and the
    request's own, and reads neither the request nor the application's state itself.

    Args:
        settings: the service's settings (deadlines, webhooks).
        store: the job store.
        runner: this process's job runner (runs a job a request here waits for at once,
            when it has room).
        preparation: the budget of pixels being prepared at once, across requests.
        caller: the key the request came with: whose work it is.
        started: the request's arrival (``time.monotonic()``; now when unknown).
        client_gone: returns an awaitable that completes once the client has gone.
    """

    settings: Settings
    store: JobStore
    runner: JobRunner
    preparation: PreparationBudget
    _: KW_ONLY
    caller: Caller
    started: float | None
    client_gone: Callable[[], Awaitable[object]]
    _handed_off: Callable[[], None] = field(default_factory=lambda: _nothing, init=False)

    # ------------------------------------------------------------- before the work
    def remaining_s(self) -> float:
        """What is left of ``request_timeout_s`` since the request arrived (504 when none)."""
        started = self.started or time.monotonic()
        timeout_s = self.settings.request_timeout_s
        left = timeout_s - (time.monotonic() - started)
        if left <= 0:
            raise DeadlineExceeded(f"no time left of the {timeout_s:g} s deadline")
        return left

    def deadline(self) -> float:
        """The ``time.monotonic()`` at which the request's ``request_timeout_s`` runs out."""
        return time.monotonic() + self.remaining_s()

    def require_job(self, respond_async: bool, what: str) -> None:
        """Refuse (422 ``send_as_job``) long work (``Work.long``: ``what``, e.g. a video)
        sent without ``Prefer: respond-async``: it only ever runs as a job."""
        if not respond_async:
            raise ValidationFailed(
                f"{what} always runs as a job; send it with the header "
                "'Prefer: respond-async' and fetch the result from the job's result_url",
                code="send_as_job",
            )

    async def webhook(self, url: str | None, events: Sequence[str] | None) -> dict[str, Any] | None:
        """The job's webhook field, or a 422 naming why the target is refused."""
        if url is None:
            if events:
                raise ValidationFailed("webhook_events: give a webhook URL too")
            return None
        if self.settings.webhook_secret is None:
            raise ValidationFailed(
                "webhook: webhooks are not configured on this server (webhook_secret)",
                code="webhook_not_allowed",
            )
        try:
            await check_target(url, WebhookPolicy.of(self.settings))
        except WebhookRefused as exc:
            raise ValidationFailed(f"webhook: {exc}", code="webhook_not_allowed") from None
        return webhook_request(url, events)

    async def check_admission(self, respond_async: bool) -> None:
        """Refuse a background job before anything of it is read or decoded when its key
        holds ``max_jobs`` unfinished jobs or the store is full (the store checks again
        when it creates the job)."""
        if respond_async:
            await self.store.check_admission(self.caller.name, self.caller.max_jobs)

    @contextlib.asynccontextmanager
    async def preparing(self, weight: int, deadline: float) -> AsyncIterator[None]:
        """Hold ``weight`` pixels of the preparation budget while the work is prepared
        (its uploads read and decoded), waiting for them until ``deadline`` at most;
        :meth:`submit` gives them back once the work is out of the request's hands
        (leaving the block does otherwise)."""
        async with self.preparation.hold(weight, deadline) as release:
            self._handed_off = release
            try:
                yield
            finally:
                self._handed_off = _nothing

    # ------------------------------------------------------------------- the work
    async def submit(
        self, work: Work, served: Served, submission: Submission
    ) -> JobResult | Accepted:
        """Run ``work`` on ``served`` (its model, as the catalog found it) as the client
        asked (see the module docstring): its result, or the background job it became."""
        if submission.respond_async:
            return await self._background_job(work, submission)
        timeout = self.remaining_s()
        if (
            submission.idempotency is not None
            or submission.webhook is not None
            or served.pool is None
        ):
            return await self._waited_job(work, served, submission, timeout)
        self._handed_off()
        running = work.run(
            served.pool,
            RunContext(
                priority=INTERACTIVE, timeout_s=timeout, progress=None, owner=self.caller.name
            ),
        )
        return await self._unless_gone(running)

    async def _background_job(self, work: Work, submission: Submission) -> Accepted:
        """Store ``work`` as a background job, with the job deadline."""
        settings = self.settings
        timeout = settings.video_job_timeout_s if work.long else settings.job_timeout_s
        priority = BULK if work.bulk else BACKGROUND
        record = self._record(work, priority, time.time() + timeout, submission)
        job, _ = await self._create(record, work, submission, here=False)
        self._handed_off()
        return Accepted(job)

    async def _waited_job(
        self, work: Work, served: Served, submission: Submission, timeout_s: float
    ) -> JobResult:
        """Store ``work`` as an interactive job and wait for it (a replay of an
        ``Idempotency-Key``: wait for the first request's job)."""
        if not served.live:
            raise NotReady(
                f"no worker serves {served.name!r} now; send the request with "
                "'Prefer: respond-async' to queue it",
                code="model_not_loaded",
            )
        record = self._record(work, INTERACTIVE, time.time() + timeout_s, submission)
        with self.store.hub.watch(done_topic(record.id)) as finished:  # before the job exists
            job, created = await self._create(record, work, submission, here=True)
            self._handed_off()
            if created:
                return await self._unless_gone(self._wait_for(job.id, job, finished, timeout_s))
        # a replay: the first request's job
        with self.store.hub.watch(done_topic(job.id)) as finished:
            return await self._unless_gone(self._wait_for(job.id, None, finished, timeout_s))

    def _record(
        self, work: Work, priority: str, deadline_at: float, submission: Submission
    ) -> JobRecord:
        return JobRecord(
            id=new_job_id(),
            kind=work.kind,
            model=work.model,
            owner=self.caller.name,
            priority=priority,
            parts=work.parts,
            unit=work.unit,
            parameters={**work.parameters, "previews": True}
            if submission.previews
            else work.parameters,
            deadline_at=deadline_at,
            webhook=submission.webhook,
        )

    async def _create(
        self, record: JobRecord, work: Work, submission: Submission, *, here: bool
    ) -> tuple[JobRecord, bool]:
        """Store the job; ``here``: a job this request waits for, which this process's
        runner runs at once when it has room (``JobRunner.create``)."""
        if work.bulk:  # a print's photo: CPU work that takes what the forwards leave
            payload = await off_loop_as_bulk(_encode_and_trim, work)
        elif work.encodes_images:  # images to encode, a clip to copy
            payload = await run_in_threadpool(_encode_and_trim, work)
        else:
            payload = work.to_payload()
        max_jobs, idempotency = self.caller.max_jobs, submission.idempotency
        if here:
            return await self.runner.create(
                record, payload, work, owner_max_jobs=max_jobs, idempotency=idempotency
            )
        return await self.store.create(
            record, payload, owner_max_jobs=max_jobs, idempotency=idempotency
        )

    async def _wait_for(
        self, job_id: str, record: JobRecord | None, finished: Watch, timeout_s: float
    ) -> JobResult:
        """Wait for an interactive job's result; past ``timeout_s`` or when the client left,
        the job is cancelled (its batch drops it at the next step).

        ``finished`` watches the job's done topic. ``record`` is the job as read after that
        watch was registered (the job this request just created), or ``None``: read it
        here. Woken by the job's finish, the request takes the result the watch was handed
        (the job ran in this process), or else reads it: one store read when the job
        succeeded (a result is written with the final state, in one write); the record is
        read only when there is no result (the job failed or was cancelled) or after
        ``REREAD_S`` without news (in case a notification was lost).
        """
        store = self.store
        deadline = time.monotonic() + timeout_s
        done = False
        try:
            if record is None:
                record = await store.get(job_id)
            while True:
                if record is None:
                    raise JobNotFound("the job was forgotten before it finished")
                if record.finished:
                    done = True
                    if record.state != "succeeded":
                        raise error_of_job(record.error)
                    data = await store.result(job_id)
                    if data is None:
                        raise JobNotFound("the job's result was forgotten")
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DeadlineExceeded(f"no result within {timeout_s:g} s")
                if await finished.wait(min(left, REREAD_S)):
                    written = finished.result  # this process finished it: no read
                    data = written.join() if written is not None else await store.result(job_id)
                    if data is not None:
                        done = True
                        break
                record = await store.get(job_id)
            return await off_loop_if_large(len(data), JobResult.from_bytes, data)
        finally:
            if not done:
                with contextlib.suppress(ServiceError):
                    await asyncio.shield(store.cancel(job_id))

    async def _unless_gone(self, work: Awaitable[T]) -> T:
        return await unless_gone(work, self.client_gone())


def _encode_and_trim(work: Work) -> bytes:
    """The work's payload; then the decode's and the encode's freed memory goes back."""
    payload = work.to_payload()
    return_freed_memory()
    return payload


async def unless_gone(work: Awaitable[T], gone: Awaitable[object]) -> T:
    """Await ``work`` while watching ``gone`` (it completes when the client leaves); when
    the client goes first, cancel ``work`` (its jobs leave the queue, or their batch at
    the next step) and raise ``ClientClosedRequest`` (logged as 499)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(gone)
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise ClientClosedRequest("the client closed the connection: its work was cancelled")
    return task.result()

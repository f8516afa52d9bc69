"""Prepared requests: what a validated request asks a model to do, runnable anywhere.

A route validates a request once and turns it into a :class:`Work`
(:class:`~service.execution.generate.GenerateWork`,
:class:`~service.execution.stylize.StylizeWork`,
:class:`~service.execution.video.StylizeVideoWork`). The same object then runs in one
of two ways, as the executor (:mod:`service.execution.executor`) decides:

* here, at once, on this process's worker pool (a synchronous request where the model
  is loaded): :meth:`Work.run`;
* as a job: :meth:`Work.to_payload` gives the bytes the job store keeps (decoded
  images travel as 8-bit PNGs, never as float tensors), and the worker that claims the
  job rebuilds the work with :func:`service.execution.kinds.work_from_payload` and runs
  it.

Either way the answer is a :class:`~service.jobs.records.JobResult`. Uploads are decoded
to 8-bit RGB once by the route; an 8-bit source survives the PNG round trip exactly, so
a job gives the same images as the synchronous request, and a rerun of a job after a
crash gives the same images as its first run.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from torch import Tensor

from service.errors import DeadlineExceeded
from service.execution.previews import Previews
from service.jobs.records import JobResult
from service.model_types import BatchJob
from service.priorities import BULK
from service.workers.pool import AnyWorkerPool, WorkerPool

JobT = TypeVar("JobT", bound=BatchJob)


class Progress:
    """Step progress of a job made of ``parts`` batcher items (e.g. one per image).

    Parts report ``(done, total)`` from the worker thread; the job's progress is the
    slowest part's, ``step`` of ``total``; ``notify`` is called after each report.
    """

    def __init__(self, parts: int, notify: Callable[[], None] = lambda: None) -> None:
        self._done = [0] * parts
        self._total = 0
        self._lock = threading.Lock()
        self._notify = notify

    def reporter(self, part: int) -> Callable[[int, int], None]:
        def report(done: int, total: int) -> None:  # worker thread
            with self._lock:
                self._done[part] = done
                self._total = total
            self._notify()

        return report

    def current(self) -> tuple[int, int]:
        """``(step, total)``: the slowest part's step."""
        with self._lock:
            return min(self._done, default=0), self._total


class Checkpoint(ABC):
    """A running job's checkpoints (``JobStore.put_checkpoint``): what a long job saves
    as it goes, for the next worker to resume from if this one is lost.

    ``resumed_from``: set by the work when it resumed (what it found done)."""

    resumed_from: int = 0

    @abstractmethod
    async def load(self, name: str) -> bytes | None:
        """The checkpoint ``name``, or ``None`` (never saved, or the store is away)."""

    @abstractmethod
    async def save(self, name: str, data: bytes) -> bool:
        """Keep ``data`` as ``name``; False when the store did not take it (the work
        then saves nothing more in this run)."""


@dataclass(frozen=True)
class RunContext:
    """How one :class:`Work` runs on its pool (what :meth:`Work.run` is given).

    ``priority``: the batcher its items go to; ``timeout_s``: what is left of its
    deadline at ``started``, or ``None``; ``progress``: the job's step progress (its one
    sink), when it runs as one; ``owner``: the API key it runs for; ``checkpoint``: the
    job's, when it runs as one (a long work saves its progress there, and resumes);
    ``previews``: the job's live previews, when it was asked for them (a kind of work that
    has none ignores it); ``on_device_done``: called once the work's forwards are over
    (:meth:`done_with_device`)."""

    priority: str
    timeout_s: float | None
    progress: Progress | None
    owner: str
    checkpoint: Checkpoint | None = None
    previews: Previews | None = None
    on_device_done: Callable[[], None] | None = None
    started: float = field(default_factory=time.monotonic)

    async def submit(
        self, pool: WorkerPool[Any, JobT], job: JobT, part: int | None, *, bulk: bool = False
    ) -> Tensor:
        """``job`` through ``pool`` with this run's priority and owner and what is left of
        its deadline now. As part ``part`` of the work, its progress (each step, through
        its batch's step control) and previews report as that part's; ``None``: one of
        the items a work sends in turn, which counts them itself (:meth:`report`).
        ``bulk``: ``job`` is a step of bulk work (a print's tile, a clip's chunk), which runs at ``BULK``
        whatever this run's priority (``service.priorities``).

        Raises:
            DeadlineExceeded: the deadline passed before ``job`` was sent."""
        left = None if self.timeout_s is None else self.started + self.timeout_s - time.monotonic()
        if left is not None and left <= 0:
            raise DeadlineExceeded("the job's deadline passed")
        return await pool.submit(
            job,
            priority=BULK if bulk else self.priority,
            timeout_s=left,
            on_progress=None
            if part is None or self.progress is None
            else self.progress.reporter(part),
            owner=self.owner,
            on_preview=None if self.previews is None else self.previews.watcher(part),
        )

    def done_with_device(self) -> None:
        """The work sends no more items: what is left is CPU work on its result (encoding
        it), so a bulk job's slot goes to the next print or clip (``JobRunner``)."""
        if self.on_device_done is not None:
            self.on_device_done()

    def report(self, done: int, total: int) -> None:
        """``done`` of the ``total`` items that the work sends in turn are done."""
        if self.progress is not None:
            self.progress.reporter(0)(done, total)


class Work(ABC):
    """A validated request for one model; see the module docstring."""

    kind: ClassVar[str]
    model: ClassVar[str]
    #: Only ever a job, with the longer deadline ``video_job_timeout_s``.
    long: ClassVar[bool] = False
    #: Whether :meth:`to_payload` encodes images (or copies a clip): CPU work that the
    #: executor does on a thread, then gives the freed memory back.
    encodes_images: ClassVar[bool] = False

    @property
    def bulk(self) -> bool:
        """Whether the work is bulk work (``service.priorities.BULK``: a print, a clip):
        its job is queued as ``BULK``, its payload is encoded on the low-priority bulk
        threads, and it sends its items with ``bulk=True``."""
        return False

    @property
    @abstractmethod
    def unit(self) -> str:
        """What one progress step is, for clients."""

    @property
    def parts(self) -> int:
        """Batcher items the work is split into (progress follows the slowest)."""
        return 1

    @property
    @abstractmethod
    def parameters(self) -> dict[str, Any]:
        """How the result will be made, as the job shows it before it runs."""

    @abstractmethod
    def to_payload(self) -> bytes:
        """The bytes a job store keeps (off the event loop when :attr:`encodes_images`)."""

    @classmethod
    @abstractmethod
    def from_payload(cls, header: dict[str, Any], blobs: list[bytes]) -> Work: ...

    @abstractmethod
    async def run(self, pool: AnyWorkerPool, context: RunContext) -> JobResult:
        """Run on ``pool``, the pool of ``model``, as ``context`` says (its items go to the
        ``context.priority`` batcher), and encode the answer off the event loop."""

"""The priorities work runs at: interactive, background and bulk.

* ``INTERACTIVE``: a client waits for the answer on its open connection (a synchronous
  request, whether it runs here at once or through the queue);
* ``BACKGROUND``: an async job (``Prefer: respond-async``), answered later;
* ``BULK``: a print (``models.adain.large``) or a clip (``models.adain.video``;
  ``Work.bulk``): an async job of long work made of many short steps (tiles, chunks),
  which yields to every other forward.

Interactive work goes first: a worker claims interactive jobs first, then background
ones, then bulk ones, and runs at most ``bulk_jobs_per_device`` bulk jobs per device at
once (each holds its picture or its clip's segments in memory: a replica takes another
print or clip only when one is painted, and small jobs are claimed beside it). A key's
``max_jobs`` counts its async jobs, background and bulk (:data:`ASYNC_PRIORITIES`;
``service.jobs``).

Every worker pool keeps one batcher per priority on each device, and the device's gate
ranks their forwards in the order of :data:`PRIORITIES` (``service.batching.DeviceGate``):
a forward waits for at most one step of a less urgent one, which pauses at its step
boundaries (and between the layers of its networks inside a step,
``models.control.pausing``) while more urgent work runs, and then resumes where it
stopped. So a small job waits for one tile of a print, one layer of its base or of a
clip's chunk, never for the print or the clip.

The CPU work of bulk work outside its forwards (building a print's plan, taking its
tiles in, encoding its picture; decoding a clip, its motion, encoding its segments) runs on :func:`off_loop_as_bulk`'s threads, whose OS
priority is lowered by :data:`BULK_NICE`: on a busy CPU they take what the other work
leaves. Bulk forwards themselves keep the normal OS priority, because more urgent
forwards wait for their step to end.

Which priority a piece of work runs at is decided in one place, the executor
(``service.execution``): a job's record carries it (a print's or a clip's job is queued
as ``BULK``), and their steps are sent as bulk (``RunContext.submit(..., bulk=True)``). The names
live here, below the job store, the worker pools and the executor, because all three
speak of them and none of them may import another for them: the store and the pools are
independent layers that only the executor joins.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

INTERACTIVE, BACKGROUND, BULK = "interactive", "background", "bulk"
#: Every priority, the most urgent first (a forward's rank is its index here).
PRIORITIES = (INTERACTIVE, BACKGROUND, BULK)
#: The priorities of async jobs (``Prefer: respond-async``): what a key's ``max_jobs``
#: counts and ``GET /v1/jobs`` lists. A bulk job is an async job whose work is bulk.
ASYNC_PRIORITIES = (BACKGROUND, BULK)
#: How much lower (a ``nice`` increment) bulk work's CPU threads run than the service.
BULK_NICE = 10
#: Threads for bulk work's CPU work outside its forwards (two prints may overlap).
BULK_THREADS = 2

T = TypeVar("T")
logger = logging.getLogger("atelier.priorities")


def rank(priority: str) -> int:
    """``priority``'s rank on a device: 0 is the most urgent."""
    try:
        return PRIORITIES.index(priority)
    except ValueError:
        raise ValueError(f"unknown priority {priority!r}; expected one of {PRIORITIES}") from None


def lower_this_thread(nice: int) -> None:
    """Lower the calling thread's OS priority by ``nice`` (Linux: a thread's own nice
    value, which the threads it starts later inherit, e.g. its OpenMP team; the thread
    pools of low-priority work call it as their initializer). Elsewhere, or where the OS
    refuses, the thread keeps its priority."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + nice)
    except OSError as exc:
        logger.warning("could not lower a thread's priority: %s", exc)


_bulk_threads = ThreadPoolExecutor(
    max_workers=BULK_THREADS,
    thread_name_prefix="bulk-cpu",
    initializer=lower_this_thread,
    initargs=(BULK_NICE,),
)


async def off_loop_as_bulk(function: Callable[..., T], *args: Any, **keywords: Any) -> T:
    """``function(*args, **keywords)`` on a bulk thread (OS priority lowered by
    :data:`BULK_NICE`), awaited from the event loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_bulk_threads, partial(function, *args, **keywords))

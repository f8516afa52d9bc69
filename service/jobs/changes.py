"""How a store's changes reach the waiters of this process: topics and a fan-out hub.

A store calls ``hub.notify(topic)`` for every change it makes or hears of (topics from
:func:`job_topic`, :func:`cancel_topic`, :func:`done_topic`, :func:`work_topic`); a
change this process made is announced here at once, without waiting for the store's
own broadcast, and a job it finished with :meth:`ChangeHub.finished`, which hands the
result it wrote to the waiters here. Waiters (event streams, synchronous requests,
workers) wake without polling, and still re-read after a timeout, so a lost
notification costs latency, never correctness.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.jobs.records import Packed


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
        self.result: Packed | None = None

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

    def finished(self, job_id: str, result: Packed | None) -> None:
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

"""Event streams' source: one reader per followed job per replica.

A hundred ``/v1/jobs/{id}/events`` streams of one job cost one store read per change:
the job's :class:`JobFeed` re-reads it when the store announces a change (or after a
while, in case an announcement was lost), serializes it once, and every stream sends
that. A job submitted with previews (``service.jobs.previews``) has its latest preview
read with it while it runs, and sent once per new preview, before the job's state.
:class:`JobFeeds` also bounds the streams of the replica and of each key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator

from service.errors import Overloaded, StoreUnavailable
from service.jobs.previews import PREVIEW_CHECKPOINT, preview_event, wants_previews
from service.jobs.records import RUNNING
from service.jobs.store import JobStore, job_topic

#: Seconds between re-reads of a job whose change notification may have been missed.
REREAD_S = 5.0


class JobFeed:
    """One job's changes, read from the store once per change for every stream here."""

    def __init__(self, store: JobStore, job_id: str) -> None:
        self.store = store
        self.job_id = job_id
        self.streams = 0
        #: The job's latest state event and the version that published it.
        self.latest: tuple[str, str] | None = None
        self.latest_version = 0
        #: ``(version, data)`` of the job's latest ``preview`` event, if any.
        self.preview: tuple[int, str] | None = None
        self._preview_blob: bytes | None = None
        self.version = 0
        self._changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def _publish(self, event: str, data: str) -> None:
        self.version += 1
        if event == "preview":
            self.preview = (self.version, data)
        else:
            self.latest = (event, data)
            self.latest_version = self.version
        self._changed.set()
        self._changed = asyncio.Event()

    async def _read_preview(self) -> None:
        """Publish the job's preview if it changed (a store that does not answer: later)."""
        try:
            blob = await self.store.checkpoint(self.job_id, PREVIEW_CHECKPOINT)
        except StoreUnavailable:
            return
        if blob is None or blob == self._preview_blob:
            return
        self._preview_blob = blob
        try:
            data = preview_event(blob)
        except ValueError:  # not a preview: nothing to show
            return
        self._publish("preview", data)

    async def run(self) -> None:
        with self.store.hub.watch(job_topic(self.job_id)) as changed:
            while True:
                try:
                    record = await self.store.get(self.job_id)
                except StoreUnavailable:
                    await changed.wait(1.0)
                    continue
                if record is None:
                    self._publish("gone", json.dumps({"id": self.job_id}))
                    return
                if record.state == RUNNING and wants_previews(record):
                    await self._read_preview()
                data = json.dumps(record.public())
                if self.latest is None or data != self.latest[1]:
                    self._publish("done" if record.finished else "progress", data)
                if record.finished:
                    return
                await changed.wait(REREAD_S)

    async def wait(self, seen: int, stop: asyncio.Event) -> None:
        """Until a version after ``seen`` exists, or ``stop`` is set."""
        if self.version != seen or stop.is_set():
            return
        changed = asyncio.ensure_future(self._changed.wait())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({changed, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            stopped.cancel()


class JobFeeds:
    """The feeds of this replica, and the bounds on its event streams."""

    def __init__(self, store: JobStore, *, max_streams: int, key_max_streams: int) -> None:
        self.store = store
        self.max_streams = max_streams
        self.key_max_streams = key_max_streams
        self._feeds: dict[str, JobFeed] = {}
        self._by_key: dict[str, int] = defaultdict(int)
        self.open = 0

    @contextlib.contextmanager
    def room(self, key: str) -> Iterator[None]:
        """Hold one of the replica's and the key's stream places for the block, or refuse
        (429) past either bound. Taken before the answer starts (a refusal inside the
        stream would cut a 200 short) and held until it ends."""
        if self.open >= self.max_streams:
            raise Overloaded(
                f"{self.max_streams} event streams are open here (max_event_streams); poll "
                "GET /v1/jobs/{id} or retry later",
                retry_after_s=5,
                code="too_many_streams",
            )
        if self._by_key[key] >= self.key_max_streams:
            raise Overloaded(
                f"this key has {self.key_max_streams} event streams open "
                "(key_max_event_streams); close one or poll GET /v1/jobs/{id}",
                retry_after_s=5,
                code="too_many_streams",
            )
        self.open += 1
        self._by_key[key] += 1
        try:
            yield
        finally:
            self.open -= 1
            self._by_key[key] -= 1
            if self._by_key[key] == 0:
                del self._by_key[key]

    @contextlib.asynccontextmanager
    async def stream(self, job_id: str) -> AsyncIterator[JobFeed]:
        """Follow ``job_id``'s feed (started for the first stream, stopped after the last)."""
        feed = self._feeds.get(job_id)
        if feed is None:
            feed = self._feeds[job_id] = JobFeed(self.store, job_id)
            feed.task = asyncio.get_running_loop().create_task(feed.run())
        feed.streams += 1
        try:
            yield feed
        finally:
            feed.streams -= 1
            if feed.streams == 0:
                if feed.task is not None:
                    feed.task.cancel()
                del self._feeds[job_id]

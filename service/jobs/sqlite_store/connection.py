"""The SQLite connection every role of :class:`~service.jobs.sqlite_store.SqliteJobStore`
stands on: the schema, the store's own thread, the breaker around each call, write
transactions, the job rows, and the poll that hears other processes' writes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from service.errors import StoreFull, StoreUnavailable
from service.jobs.blobs import WRITE_GRACE_S, BlobStore, forget
from service.jobs.blobs.volume import VolumeBlobs
from service.jobs.changes import ChangeHub
from service.jobs.records import JobRecord
from service.jobs.roles import Backend, BackendOptions
from service.jobs.shared import StoreLimits

if TYPE_CHECKING:
    from typing_extensions import Unpack

T = TypeVar("T")

logger = logging.getLogger("atelier.jobs")

#: What the write-ahead log is cut back to after a checkpoint (SQLite keeps it at its
#: largest size otherwise: one big write would hold its bytes on disk for good).
WAL_KEPT_BYTES = 4 * 1024 * 1024

#: A blob no row names is deleted at start once this old (a younger one may be another
#: process's write whose transaction is about to commit).
ORPHAN_AGE_S = WRITE_GRACE_S

#: ``PRAGMA auto_vacuum``'s value for "free pages are given back on request".
INCREMENTAL = 2

#: The most free pages one call gives back (their bytes).
SPACE_STEP_BYTES = 32 * 1024 * 1024

COLUMNS = list(JobRecord.__dataclass_fields__)
_INTEGER = {"parts", "step", "total", "attempts", "input_bytes", "result_bytes", "cancel_requested"}
_REAL = {"created_at", "started_at", "finished_at", "deadline_at"}


def _column(name: str) -> str:
    kind = "INTEGER" if name in _INTEGER else "REAL" if name in _REAL else "TEXT"
    return f"{name} {kind}"


def db_value(value: Any) -> Any:
    """A record field as SQLite stores it: ``None`` as NULL, dicts as JSON."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


#: Every role's tables (``jobs`` and ``blobs``: a blob's bytes in ``data``, or, from
#: ``FILE_MIN_BYTES`` on, empty there and kept in the blob store under the name ``file``
#: with its ``checksum`` (``service.jobs.blobs``); ``owners``, ``idempotency`` and
#: ``checkpoints``: the queue, with the outbox's ``webhook_*`` columns; ``tokens``: the
#: rate limits; ``workers`` and ``models``: the directory).
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS jobs (
    {", ".join(_column(name) for name in COLUMNS)},
    seq INTEGER NOT NULL,
    lease_until REAL,
    webhook_due REAL,
    webhook_progress_next REAL,
    PRIMARY KEY (id)
);
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs (state, model, priority, owner, seq);
CREATE INDEX IF NOT EXISTS jobs_owner ON jobs (owner, seq);
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished_at);
CREATE INDEX IF NOT EXISTS jobs_webhook ON jobs (webhook_due);
CREATE TABLE IF NOT EXISTS blobs (
    id TEXT NOT NULL, kind TEXT NOT NULL, data BLOB NOT NULL, file TEXT, checksum TEXT,
    PRIMARY KEY (id, kind)
);
CREATE TABLE IF NOT EXISTS owners (
    model TEXT NOT NULL, priority TEXT NOT NULL, owner TEXT NOT NULL,
    last_served INTEGER NOT NULL, PRIMARY KEY (model, priority, owner)
);
CREATE TABLE IF NOT EXISTS idempotency (
    owner TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL, job_id TEXT NOT NULL,
    expires_at REAL NOT NULL, PRIMARY KEY (owner, key)
);
CREATE TABLE IF NOT EXISTS workers (id TEXT PRIMARY KEY, models TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS models (name TEXT PRIMARY KEY, details TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (owner TEXT PRIMARY KEY, tat REAL NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints (
    job_id TEXT NOT NULL, name TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (job_id, name)
);
"""


def reclaim_free_pages(db: sqlite3.Connection) -> None:
    """Make the database give deleted pages back (``auto_vacuum = INCREMENTAL``; see
    ``SqliteBackend._give_back_space``). A new file takes the mode at once; a store made
    before it is rebuilt once (``VACUUM``), which needs free space about its size: on a
    volume without it the store opens as it is and tries again at its next start."""
    if db.execute("PRAGMA auto_vacuum").fetchone()[0] == INCREMENTAL:
        return
    db.execute("PRAGMA auto_vacuum = INCREMENTAL")
    try:
        db.execute("VACUUM")
    except sqlite3.OperationalError as exc:
        logger.warning(
            "could not rebuild the job database to give space back", extra={"error": str(exc)}
        )


def add_file_columns(db: sqlite3.Connection) -> None:
    """A store made before blobs could be files gains the ``file`` and ``checksum``
    columns; its rows keep their bytes where they are and read as before."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(blobs)")}
    for column in ("file", "checksum"):
        if column not in columns:
            db.execute(f"ALTER TABLE blobs ADD COLUMN {column} TEXT")


class SqliteBackend(Backend):
    """The database file ``path`` (created with its folder when missing).

    All database work runs on one thread of this store's own, never on the event loop.

    Args:
        path: the database file.
        limits: the store's bounds.
        hub: where change notifications go.
        poll_s: how often other processes' writes are looked for.
        clock: Unix seconds (tests move it).
        blobs: where big inputs and results go (default: the folder beside ``path``,
            ``jobs-files`` for ``jobs.db``).
        options: :class:`~service.jobs.roles.BackendOptions`.
    """

    shared = False

    def __init__(
        self,
        path: Path,
        limits: StoreLimits,
        hub: ChangeHub | None = None,
        *,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.time,
        blobs: BlobStore | None = None,
        **options: Unpack[BackendOptions],
    ) -> None:
        super().__init__(limits, hub, **options)
        self.path = Path(path)
        self.poll_s = poll_s
        self._clock = clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-jobs")
        self._connection: sqlite3.Connection | None = None
        self._data_version = -1
        #: the big inputs and results
        self.blobs = blobs or VolumeBlobs(self.path.with_name(self.path.stem + "-files"))
        #: blobs the open transaction stops naming: deleted once it commits
        self._unnamed: list[str] = []
        #: blobs committed transactions stopped naming, for ``_run`` to delete off the
        #: database's thread (a bucket's latency is not the database's)
        self._dropped: list[str] = []

    # ----------------------------------------------------------------- lifecycle
    async def _open(self) -> None:
        """Connect outside the breaker: opening an old store may reclaim its free pages
        once (:func:`reclaim_free_pages`), which takes time in proportion to its size and
        is no stall."""
        self._loop = asyncio.get_running_loop()
        await self._mapped(self._connect)

    async def _shut(self) -> None:
        if self._connection is not None:
            await self._mapped(self._connection.close)
        self._executor.shutdown(wait=True)

    def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # a new file: before its first page
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=10000")
        db.execute(f"PRAGMA journal_size_limit={WAL_KEPT_BYTES}")
        reclaim_free_pages(db)
        db.executescript(SCHEMA)
        add_file_columns(db)
        self._connection = db
        self._data_version = self._version()
        kept = {row[0] for row in db.execute("SELECT file FROM blobs WHERE file IS NOT NULL")}
        try:
            self.blobs.sweep(kept, older_than_s=ORPHAN_AGE_S)
        except StoreUnavailable:  # the next start sweeps again; the jobs need no sweep
            logger.warning("could not sweep the job blobs no row names")

    async def now(self) -> float:
        return self._clock()

    @property
    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            raise StoreUnavailable("the job database is not open")
        return self._connection

    def _version(self) -> int:
        version: int = self._db.execute("PRAGMA data_version").fetchone()[0]
        return version

    async def _hear_others(self) -> None:
        """Wake every waiter when another process has written (``data_version`` moved,
        polled every ``poll_s``)."""
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                version = await self._run(self._version)
            except StoreUnavailable:
                continue
            if version != self._data_version:
                self._data_version = version
                self.hub.notify_all()

    def _notify_soon(self, topic: str) -> None:
        """From the store's thread: the hub lives on the event loop."""
        self._loop.call_soon_threadsafe(self.hub.notify, topic)

    # ---------------------------------------------------------------------- calls
    async def _run(self, fn: Callable[..., T], *args: Any, payload_bytes: int | None = None) -> T:
        """``fn(*args)`` on the database's thread, through the breaker (the bytes among
        ``args`` add to its time, or ``payload_bytes``: what a read is given time for)."""
        if payload_bytes is None:
            payload_bytes = sum(len(arg) for arg in args if isinstance(arg, bytes | bytearray))
        try:
            return await self.breaker.call(self._mapped(fn, *args), payload_bytes=payload_bytes)
        finally:
            await self._delete_dropped()

    async def _delete_dropped(self) -> None:
        """Delete the blobs committed transactions stopped naming (on a worker thread,
        outside the breaker; one that cannot be deleted now is swept at the next start)."""
        names, self._dropped = self._dropped, []
        await forget(self.blobs, names)

    async def _mapped(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except sqlite3.OperationalError as exc:
            # SQLite's own words go to the log, never into an answer
            logger.warning("job database error", extra={"error": str(exc)})
            if "full" in str(exc):  # SQLITE_FULL: "database or disk is full"
                raise StoreFull(
                    "the job database's disk is full: nothing new can be stored until "
                    "finished jobs expire or an operator frees space"
                ) from exc
            if "readonly" in str(exc):
                raise StoreUnavailable("the job database is read-only") from exc
            raise StoreUnavailable("the job database cannot be used right now") from exc

    async def _probe(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, lambda: self._db.execute("SELECT 1"))

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction (rolled back on any error).

        Some errors end the transaction inside SQLite already (``SQLITE_FULL`` rolls it
        back): a ``ROLLBACK`` then would fail with "no transaction is active" and hide
        the error that matters, so it is issued only while one is open."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        self._unnamed.clear()
        try:
            yield db
        except BaseException:
            self._unnamed.clear()
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        self._dropped.extend(self._unnamed)
        self._unnamed.clear()

    def _drop_blobs(self, db: sqlite3.Connection, job_id: str, kind: str | None = None) -> None:
        """Delete the job's blobs (of ``kind``, or all) inside the transaction; their
        files go when it commits."""
        where, args = (
            ("id = ?", (job_id,)) if kind is None else ("id = ? AND kind = ?", (job_id, kind))
        )
        self._unnamed.extend(
            row[0]
            for row in db.execute(
                f"SELECT file FROM blobs WHERE {where} AND file IS NOT NULL", args
            )
        )
        db.execute(f"DELETE FROM blobs WHERE {where}", args)

    async def give_back_space(self) -> None:
        """Free pages go back to the file system, at most ``SPACE_STEP_BYTES`` a call
        (the reaper calls it after each round, so a volume that jobs filled empties as
        they expire, without one long call that would read as a stall)."""
        await self._run(self._give_back_space, payload_bytes=2 * SPACE_STEP_BYTES)

    def _give_back_space(self) -> None:
        db = self._db
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        if db.execute("PRAGMA freelist_count").fetchone()[0]:
            # a script: each page is a step of the statement, and execute() takes only one
            db.executescript(f"PRAGMA incremental_vacuum({SPACE_STEP_BYTES // page_size});")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    # ----------------------------------------------------------------------- rows
    def _record(self, row: sqlite3.Row) -> JobRecord:
        return JobRecord.from_fields(
            {name: "" if row[name] is None else str(row[name]) for name in COLUMNS}
        )

    def _row(self, db: sqlite3.Connection, job_id: str) -> sqlite3.Row | None:
        """The job's row (None: missing, or finished past ``ttl_s``)."""
        row: sqlite3.Row | None = db.execute(
            "SELECT * FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        if row is None or self._expired(row):
            return None
        return row

    def _expired(self, row: sqlite3.Row) -> bool:
        return self.limits.expired(row["finished_at"], self._clock())

    def _update(self, db: sqlite3.Connection, job_id: str, **values: Any) -> None:
        assignments = ", ".join(f"{name} = ?" for name in values)
        db.execute(
            f"UPDATE jobs SET {assignments} WHERE id = ?",
            (*(db_value(v) for v in values.values()), job_id),
        )

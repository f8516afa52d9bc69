"""The embedded job store: one SQLite database file (WAL) under the state directory.

The default when no Redis is configured: a single ``atelier serve`` keeps the jobs it
accepted, and their results, across a restart or a crash. Processes on the same host
may share the file (``atelier worker`` beside ``atelier serve``): every write is one
``BEGIN IMMEDIATE`` transaction, and each process notices the others' writes through
``PRAGMA data_version`` (polled every ``poll_s``) and wakes its waiters.

All database work runs on one thread of this store's own, never on the event loop.
"""

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
from typing import Any, TypeVar

from service.jobs.records import (
    CANCELLED,
    FAILED,
    FINAL_STATES,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    JobRecord,
)
from service.jobs.store import (
    ChangeHub,
    Claim,
    Delivery,
    IdempotencyKeyReused,
    IdempotentJobExpired,
    JobStore,
    Refused,
    StoreFull,
    StoreLimits,
    StoreUnavailable,
    cancel_topic,
    cancelled_error,
    done_topic,
    job_topic,
    late_error,
    lost_error,
    work_topic,
)
from service.priorities import BACKGROUND

logger = logging.getLogger("atelier.jobs.sqlite")
T = TypeVar("T")

_COLUMNS = list(JobRecord.__dataclass_fields__)
_INTEGER = {"parts", "step", "total", "attempts", "input_bytes", "result_bytes", "cancel_requested"}
_REAL = {"created_at", "started_at", "finished_at", "deadline_at"}
_UNFINISHED = (QUEUED, RUNNING)


def _column(name: str) -> str:
    kind = "INTEGER" if name in _INTEGER else "REAL" if name in _REAL else "TEXT"
    return f"{name} {kind}"


def _db_value(value: Any) -> Any:
    """A record field as SQLite stores it: ``None`` as NULL, dicts as JSON."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS jobs (
    {", ".join(_column(name) for name in _COLUMNS)},
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
    id TEXT NOT NULL, kind TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (id, kind)
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


#: The size a result read is given time for (a print-size PNG is tens of MB).
RESULT_BYTES = 64 * 1024 * 1024


class SqliteJobStore(JobStore):
    """Jobs in ``path`` (created with its folder when missing).

    Args:
        path: the database file.
        limits: the store's bounds.
        hub: where change notifications go.
        poll_s: how often other processes' writes are looked for.
        webhook_progress_interval_s: least time between two progress webhooks of a job.
        clock: Unix seconds (tests move it).
    """

    shared = False

    def __init__(
        self,
        path: Path,
        limits: StoreLimits,
        hub: ChangeHub | None = None,
        *,
        poll_s: float = 0.2,
        webhook_progress_interval_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        call_timeout_s: float = 1.0,
        probe_interval_s: float = 0.5,
    ) -> None:
        super().__init__(
            limits, hub, call_timeout_s=call_timeout_s, probe_interval_s=probe_interval_s
        )
        self.path = Path(path)
        self.poll_s = poll_s
        self.webhook_progress_interval_s = webhook_progress_interval_s
        self._clock = clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-jobs")
        self._connection: sqlite3.Connection | None = None
        self._poller: asyncio.Task[None] | None = None
        self._data_version = -1

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._run(self._open)
        self._poller = asyncio.get_running_loop().create_task(self._poll_other_writers())

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        await self.breaker.close()
        if self._connection is not None:
            await self._mapped(self._connection.close)
        self._executor.shutdown(wait=True)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=10000")
        db.executescript(_SCHEMA)
        self._connection = db
        self._data_version = self._version()

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

    async def _poll_other_writers(self) -> None:
        """Wake every waiter when another process has written (``data_version`` moved)."""
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                version = await self._run(self._version)
            except StoreUnavailable:
                continue
            if version != self._data_version:
                self._data_version = version
                self.hub.notify_all()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the database's thread, through the breaker (the bytes among
        ``args`` add to its time; a result or checkpoint read is given ``RESULT_BYTES``'s)."""
        size = sum(len(arg) for arg in args if isinstance(arg, bytes | bytearray))
        if fn in (self._result, self._checkpoint):
            size = RESULT_BYTES
        return await self.breaker.call(self._mapped(fn, *args), payload_bytes=size)

    async def _mapped(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except sqlite3.OperationalError as exc:
            if "full" in str(exc):  # SQLITE_FULL: "database or disk is full"
                raise StoreFull(f"the job database cannot write: {exc}") from exc
            if "readonly" in str(exc):
                raise StoreUnavailable(f"the job database is read-only: {exc}") from exc
            raise StoreUnavailable(f"the job database is unavailable: {exc}") from exc

    async def _probe(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, lambda: self._db.execute("SELECT 1"))

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    # ------------------------------------------------------------------ helpers
    def _record(self, row: sqlite3.Row) -> JobRecord:
        return JobRecord.from_fields(
            {name: "" if row[name] is None else str(row[name]) for name in _COLUMNS}
        )

    def _row(self, db: sqlite3.Connection, job_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = db.execute(
            "SELECT * FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        if row is None or self._expired(row):
            return None
        return row

    def _expired(self, row: sqlite3.Row) -> bool:
        finished = row["finished_at"]
        return finished is not None and finished + self.limits.ttl_s <= self._clock()

    def _update(self, db: sqlite3.Connection, job_id: str, **values: Any) -> None:
        assignments = ", ".join(f"{name} = ?" for name in values)
        db.execute(
            f"UPDATE jobs SET {assignments} WHERE id = ?",
            (*(_db_value(v) for v in values.values()), job_id),
        )

    def _counts(self, db: sqlite3.Connection, owner: str) -> tuple[int, int, int]:
        """Unfinished background jobs in all and of ``owner``, and unfinished input bytes."""
        total, mine, in_bytes = db.execute(
            "SELECT COUNT(*) FILTER (WHERE priority = ?),"
            " COUNT(*) FILTER (WHERE priority = ? AND owner = ?),"
            " COALESCE(SUM(input_bytes), 0)"
            " FROM jobs WHERE state IN (?, ?)",
            (BACKGROUND, BACKGROUND, owner, *_UNFINISHED),
        ).fetchone()
        return total, mine, in_bytes

    def _admit(
        self, db: sqlite3.Connection, owner: str, owner_max_jobs: int, priority: str, size: int
    ) -> None:
        total, mine, in_bytes = self._counts(db, owner)
        limits = self.limits
        if priority == BACKGROUND and mine >= owner_max_jobs:
            raise Refused(
                f"this key has {mine} unfinished jobs, its limit (max_jobs of the key)",
                limit="key_max_jobs",
            )
        if priority == BACKGROUND and total >= limits.max_jobs:
            raise Refused(
                f"too many jobs: {limits.max_jobs} are queued or running (max_jobs)",
                limit="max_jobs",
            )
        if in_bytes + size > limits.inputs_max_bytes:
            raise Refused(
                f"the queued inputs would pass {limits.inputs_max_bytes} bytes "
                "(job_inputs_max_bytes)",
                limit="job_inputs_max_bytes",
            )

    # ------------------------------------------------------------------ API side
    async def check_admission(self, owner: str, owner_max_jobs: int) -> None:
        await self._run(self._check_admission, owner, owner_max_jobs)

    def _check_admission(self, owner: str, owner_max_jobs: int) -> None:
        self._admit(self._db, owner, owner_max_jobs, BACKGROUND, 0)

    async def create(
        self,
        record: JobRecord,
        payload: bytes,
        *,
        owner_max_jobs: int,
        idempotency: tuple[str, str] | None = None,
        run_by: tuple[str, float] | None = None,
    ) -> tuple[JobRecord, bool]:
        job, created = await self._run(
            self._create, record, payload, owner_max_jobs, idempotency, run_by
        )
        if created and run_by is None:
            self.hub.notify(work_topic(job.model))
        return job, created

    def _create(
        self,
        record: JobRecord,
        payload: bytes,
        owner_max_jobs: int,
        idempotency: tuple[str, str] | None,
        run_by: tuple[str, float] | None,
    ) -> tuple[JobRecord, bool]:
        now = self._clock()
        with self._write() as db:
            if idempotency is not None:
                key, fingerprint = idempotency
                earlier = db.execute(
                    "SELECT fingerprint, job_id FROM idempotency"
                    " WHERE owner = ? AND key = ? AND expires_at > ?",
                    (record.owner, key, now),
                ).fetchone()
                if earlier is not None:
                    if earlier["fingerprint"] != fingerprint:
                        raise IdempotencyKeyReused()
                    row = self._row(db, earlier["job_id"])
                    if row is None:
                        raise IdempotentJobExpired()
                    return self._record(row), False
            self._admit(db, record.owner, owner_max_jobs, record.priority, len(payload))
            record.input_bytes = len(payload)
            record.idempotency_key = idempotency[0] if idempotency else None
            lease_until = None
            if run_by is not None:  # held at once by a worker of this process, as claimed
                record.state, record.worker, record.attempts = RUNNING, run_by[0], 1
                record.started_at = now
                lease_until = now + run_by[1]
            values = {name: _db_value(getattr(record, name)) for name in _COLUMNS}
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            wants = record.webhook["events"] if record.webhook else []
            values |= {
                "seq": seq,
                "lease_until": lease_until,
                "webhook_progress_next": 0.0 if "progress" in wants else None,
            }
            db.execute(
                f"INSERT INTO jobs ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                tuple(values.values()),
            )
            db.execute("INSERT INTO blobs VALUES (?, 'in', ?)", (record.id, payload))
            if idempotency is not None:
                db.execute(
                    "INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?, ?)",
                    (record.owner, *idempotency, record.id, now + self.limits.idempotency_ttl_s),
                )
        return record, True

    async def get(self, job_id: str) -> JobRecord | None:
        return await self._run(self._get, job_id)

    def _get(self, job_id: str) -> JobRecord | None:
        row = self._row(self._db, job_id)
        return None if row is None else self._record(row)

    async def result(self, job_id: str) -> bytes | None:
        return await self._run(self._result, job_id)

    def _result(self, job_id: str) -> bytes | None:
        if self._row(self._db, job_id) is None:
            return None
        row = self._db.execute(
            "SELECT data FROM blobs WHERE id = ? AND kind = 'out'", (job_id,)
        ).fetchone()
        return None if row is None else bytes(row["data"])

    async def cancel(self, job_id: str) -> JobRecord | None:
        record = await self._run(self._cancel, job_id)
        if record is not None:
            self.hub.notify(job_topic(job_id))
            self.hub.notify(cancel_topic(job_id))
            if record.finished:
                self.hub.notify(done_topic(job_id))
        return record

    def _cancel(self, job_id: str) -> JobRecord | None:
        with self._write() as db:
            row = self._row(db, job_id)
            if row is None:
                return None
            if row["state"] == QUEUED:
                self._finish_in(db, row, CANCELLED, None, cancelled_error())
            elif row["state"] == RUNNING:
                self._update(db, job_id, cancel_requested=True)
            now = self._row(db, job_id)
            return None if now is None else self._record(now)

    async def delete(self, job_id: str) -> bool:
        return await self._run(self._delete, job_id)

    def _delete(self, job_id: str) -> bool:
        with self._write() as db:
            row = self._row(db, job_id)
            if row is None or row["state"] not in FINAL_STATES:
                return False
            self._forget(db, job_id)
            return True

    def _forget(self, db: sqlite3.Connection, job_id: str) -> None:
        db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        db.execute("DELETE FROM blobs WHERE id = ?", (job_id,))
        db.execute("DELETE FROM checkpoints WHERE job_id = ?", (job_id,))

    async def jobs_of(self, owner: str, limit: int) -> list[JobRecord]:
        return await self._run(self._jobs_of, owner, limit)

    def _jobs_of(self, owner: str, limit: int) -> list[JobRecord]:
        rows = self._db.execute(
            "SELECT * FROM jobs WHERE owner = ? AND priority = ? ORDER BY seq DESC LIMIT ?",
            (owner, BACKGROUND, limit * 2),
        ).fetchall()
        return [self._record(r) for r in rows if not self._expired(r)][:limit]

    async def take_token(self, owner: str, rate_per_s: float, burst: float) -> float:
        return await self._run(self._take_token, owner, rate_per_s, burst)

    def _take_token(self, owner: str, rate_per_s: float, burst: float) -> float:
        now = self._clock()
        interval = 1.0 / rate_per_s
        with self._write() as db:
            row = db.execute("SELECT tat FROM tokens WHERE owner = ?", (owner,)).fetchone()
            tat = max(row["tat"] if row else now, now)
            wait = tat + interval - now - burst * interval
            if wait > 0:
                return wait
            db.execute("INSERT OR REPLACE INTO tokens VALUES (?, ?)", (owner, tat + interval))
            return 0.0

    # --------------------------------------------------------------- worker side
    async def claim(
        self,
        worker: str,
        model: str,
        priorities: tuple[str, ...],
        lease_s: float,
        *,
        skip_owners: frozenset[str] = frozenset(),
    ) -> Claim | None:
        claim = await self._run(self._claim, worker, model, priorities, lease_s, skip_owners)
        if claim is not None:
            self.hub.notify(job_topic(claim.record.id))
        return claim

    def _claim(
        self,
        worker: str,
        model: str,
        priorities: tuple[str, ...],
        lease_s: float,
        skip_owners: frozenset[str],
    ) -> Claim | None:
        now = self._clock()
        with self._write() as db:
            for priority in priorities:
                heads = [
                    head
                    for head in db.execute(
                        "SELECT owner, MIN(seq) AS first FROM jobs"
                        " WHERE state = ? AND model = ? AND priority = ? GROUP BY owner",
                        (QUEUED, model, priority),
                    )
                    if head["owner"] not in skip_owners
                ]
                if not heads:
                    continue
                served = dict(
                    db.execute(
                        "SELECT owner, last_served FROM owners WHERE model = ? AND priority = ?",
                        (model, priority),
                    ).fetchall()
                )
                head = min(heads, key=lambda h: (served.get(h["owner"], 0), h["first"]))
                turn = db.execute(
                    "SELECT COALESCE(MAX(last_served), 0) + 1 FROM owners"
                ).fetchone()[0]
                db.execute(
                    "INSERT OR REPLACE INTO owners VALUES (?, ?, ?, ?)",
                    (model, priority, head["owner"], turn),
                )
                row = db.execute(
                    "SELECT * FROM jobs WHERE state = ? AND model = ? AND priority = ?"
                    " AND owner = ? AND seq = ?",
                    (QUEUED, model, priority, head["owner"], head["first"]),
                ).fetchone()
                record = self._record(row)
                record.state, record.worker = RUNNING, worker
                record.attempts += 1
                record.started_at = record.started_at or now
                self._update(
                    db,
                    record.id,
                    state=RUNNING,
                    worker=worker,
                    attempts=record.attempts,
                    started_at=record.started_at,
                    lease_until=now + lease_s,
                )
                payload = db.execute(
                    "SELECT data FROM blobs WHERE id = ? AND kind = 'in'", (record.id,)
                ).fetchone()["data"]
                more = db.execute(
                    "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = ? AND model = ?)",
                    (QUEUED, model),
                ).fetchone()[0]
                return Claim(record, bytes(payload), bool(more))
        return None

    async def renew(
        self, worker: str, job_ids: list[str], lease_s: float
    ) -> tuple[set[str], set[str]]:
        if not job_ids:
            return set(), set()
        return await self._run(self._renew, worker, job_ids, lease_s)

    def _renew(self, worker: str, job_ids: list[str], lease_s: float) -> tuple[set[str], set[str]]:
        marks = ", ".join("?" * len(job_ids))
        with self._write() as db:
            db.execute(
                f"UPDATE jobs SET lease_until = ? WHERE id IN ({marks})"
                " AND worker = ? AND state = ?",
                (self._clock() + lease_s, *job_ids, worker, RUNNING),
            )
            rows = db.execute(
                f"SELECT id, worker, state, cancel_requested FROM jobs WHERE id IN ({marks})",
                job_ids,
            ).fetchall()
        mine = {r["id"] for r in rows if r["worker"] == worker and r["state"] == RUNNING}
        cancelled = {r["id"] for r in rows if r["id"] in mine and r["cancel_requested"]}
        return cancelled, set(job_ids) - mine

    async def set_progress(self, job_id: str, worker: str, step: int, total: int) -> None:
        await self._run(self._set_progress, job_id, worker, step, total)
        self.hub.notify(job_topic(job_id))

    def _set_progress(self, job_id: str, worker: str, step: int, total: int) -> None:
        now = self._clock()
        with self._write() as db:
            db.execute(
                "UPDATE jobs SET step = ?, total = ? WHERE id = ? AND worker = ? AND state = ?",
                (step, total, job_id, worker, RUNNING),
            )
            db.execute(
                "UPDATE jobs SET webhook_due = COALESCE(webhook_due, ?),"
                " webhook_progress_next = ? WHERE id = ? AND webhook_progress_next <= ?",
                (now, now + self.webhook_progress_interval_s, job_id, now),
            )

    async def put_checkpoint(self, job_id: str, worker: str, name: str, data: bytes) -> bool:
        return await self._run(self._put_checkpoint, job_id, worker, name, data)

    def _put_checkpoint(self, job_id: str, worker: str, name: str, data: bytes) -> bool:
        """The lease check and the write in one transaction: a job that went back to the
        queue, or was finished, meanwhile keeps what it had."""
        with self._write() as db:
            row = self._row(db, job_id)
            if row is None or row["state"] != RUNNING or row["worker"] != worker:
                return False
            db.execute("INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?)", (job_id, name, data))
            return True

    async def checkpoint(self, job_id: str, name: str) -> bytes | None:
        return await self._run(self._checkpoint, job_id, name)

    def _checkpoint(self, job_id: str, name: str) -> bytes | None:
        row = self._db.execute(
            "SELECT data FROM checkpoints WHERE job_id = ? AND name = ?", (job_id, name)
        ).fetchone()
        return None if row is None else bytes(row["data"])

    async def finish(
        self,
        job_id: str,
        state: str,
        *,
        result: bytes | None = None,
        error: dict[str, str] | None = None,
        progress: tuple[int, int] | None = None,
    ) -> bool:
        done = await self._run(self._finish, job_id, state, result, error, progress)
        if done:
            self.hub.finished(job_id, result)
        return done

    def _finish(
        self,
        job_id: str,
        state: str,
        result: bytes | None,
        error: dict[str, str] | None,
        progress: tuple[int, int] | None,
    ) -> bool:
        with self._write() as db:
            row = self._row(db, job_id)
            if row is None or row["state"] in FINAL_STATES:
                return False
            if progress is not None:
                db.execute("UPDATE jobs SET step = ?, total = ? WHERE id = ?", (*progress, job_id))
            self._finish_in(db, row, state, result, error)
            return True

    def _finish_in(
        self,
        db: sqlite3.Connection,
        row: sqlite3.Row,
        state: str,
        result: bytes | None,
        error: dict[str, str] | None,
    ) -> None:
        job_id, now = row["id"], self._clock()
        size = len(result) if result is not None else 0
        wants = json.loads(row["webhook"])["events"] if row["webhook"] else []
        webhook_due = now if "completed" in wants else None
        self._update(
            db,
            job_id,
            state=state,
            finished_at=now,
            error=error,
            result_bytes=size,
            lease_until=None,
            webhook_due=webhook_due,
        )
        if state == SUCCEEDED:
            db.execute("UPDATE jobs SET step = total WHERE id = ?", (job_id,))
        db.execute("DELETE FROM blobs WHERE id = ? AND kind = 'in'", (job_id,))
        db.execute("DELETE FROM checkpoints WHERE job_id = ?", (job_id,))  # a final job needs none
        if result is not None:
            db.execute("INSERT OR REPLACE INTO blobs VALUES (?, 'out', ?)", (job_id, result))
            self._evict_results(db, keep=job_id)

    def _evict_results(self, db: sqlite3.Connection, keep: str) -> None:
        """Forget the oldest finished jobs while the held results pass the budget."""
        held = db.execute(
            "SELECT COALESCE(SUM(result_bytes), 0) FROM jobs WHERE finished_at IS NOT NULL"
        ).fetchone()[0]
        budget = self.limits.results_max_bytes
        while held > budget:
            oldest = db.execute(
                "SELECT id, result_bytes FROM jobs WHERE finished_at IS NOT NULL AND id != ?"
                " AND result_bytes > 0 ORDER BY finished_at LIMIT 1",
                (keep,),
            ).fetchone()
            if oldest is None:
                break
            self._forget(db, oldest["id"])
            held -= oldest["result_bytes"]

    async def release(self, worker: str, job_ids: list[str]) -> None:
        if job_ids:
            await self._run(self._release, worker, job_ids)
            for job_id in job_ids:
                self.hub.notify(job_topic(job_id))

    def _release(self, worker: str, job_ids: list[str]) -> None:
        marks = ", ".join("?" * len(job_ids))
        with self._write() as db:
            db.execute(
                f"UPDATE jobs SET state = ?, worker = NULL, lease_until = NULL,"
                f" attempts = attempts - 1"
                f" WHERE id IN ({marks}) AND worker = ? AND state = ?",
                (QUEUED, *job_ids, worker, RUNNING),
            )
        for model in {self._model_of(j) for j in job_ids}:
            if model is not None:
                self._notify_soon(work_topic(model))

    def _model_of(self, job_id: str) -> str | None:
        row = self._db.execute("SELECT model FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else row["model"]

    def _notify_soon(self, topic: str) -> None:
        """From the store's thread: the hub lives on the event loop."""
        self._loop.call_soon_threadsafe(self.hub.notify, topic)

    async def reap(self) -> int:
        requeued, models = await self._run(self._reap)
        for model in models:
            self.hub.notify(work_topic(model))
        if requeued:
            self.hub.notify_all()
        return requeued

    def _reap(self) -> tuple[int, set[str]]:
        now = self._clock()
        requeued, models = 0, set()
        with self._write() as db:
            lost = db.execute(
                "SELECT * FROM jobs WHERE state = ? AND lease_until < ?", (RUNNING, now)
            ).fetchall()
            for row in lost:
                if row["attempts"] >= self.limits.max_attempts:
                    self._finish_in(db, row, FAILED, None, lost_error(row["attempts"]))
                else:
                    self._update(db, row["id"], state=QUEUED, worker=None, lease_until=None)
                    requeued += 1
                    models.add(row["model"])
            late = db.execute(
                "SELECT * FROM jobs WHERE state = ? AND deadline_at <= ?",
                (QUEUED, now),
            ).fetchall()
            for row in late:
                self._finish_in(db, row, FAILED, None, late_error())
            expired = db.execute(
                "SELECT id FROM jobs WHERE finished_at <= ?",
                (now - self.limits.ttl_s,),
            ).fetchall()
            for row in expired:
                self._forget(db, row["id"])
            db.execute("DELETE FROM idempotency WHERE expires_at <= ?", (now,))
            db.execute("DELETE FROM workers WHERE expires_at <= ?", (now,))
        return requeued, models

    async def publish_models(self, worker: str, models: dict[str, Any], ttl_s: float) -> None:
        await self._run(self._publish_models, worker, models, ttl_s)

    def _publish_models(self, worker: str, models: dict[str, Any], ttl_s: float) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO workers VALUES (?, ?, ?)",
                (worker, json.dumps(sorted(models)), self._clock() + ttl_s),
            )
            for name, details in models.items():
                db.execute(
                    "INSERT OR REPLACE INTO models VALUES (?, ?)", (name, json.dumps(details))
                )

    async def withdraw(self, worker: str) -> None:
        await self._run(self._withdraw, worker)

    def _withdraw(self, worker: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM workers WHERE id = ?", (worker,))

    async def models(self) -> dict[str, tuple[dict[str, Any], bool]]:
        return await self._run(self._models)

    def _models(self) -> dict[str, tuple[dict[str, Any], bool]]:
        served: set[str] = set()
        for (names,) in self._db.execute(
            "SELECT models FROM workers WHERE expires_at > ?", (self._clock(),)
        ):
            served.update(json.loads(names))
        return {
            name: (json.loads(details), name in served)
            for name, details in self._db.execute("SELECT name, details FROM models")
        }

    async def queue_depths(self) -> dict[str, int]:
        return await self._run(self._queue_depths)

    def _queue_depths(self) -> dict[str, int]:
        rows = self._db.execute(
            "SELECT model, COUNT(*) FROM jobs WHERE state = ? GROUP BY model", (QUEUED,)
        ).fetchall()
        return {model: count for model, count in rows}

    # ------------------------------------------------------------------ webhooks
    async def due_webhooks(self, lease_s: float, limit: int) -> list[Delivery]:
        return await self._run(self._due_webhooks, lease_s, limit)

    def _due_webhooks(self, lease_s: float, limit: int) -> list[Delivery]:
        now = self._clock()
        lease = now + lease_s
        with self._write() as db:
            rows = db.execute(
                "SELECT * FROM jobs WHERE webhook_due <= ? ORDER BY webhook_due LIMIT ?",
                (now, limit),
            ).fetchall()
            for row in rows:
                db.execute("UPDATE jobs SET webhook_due = ? WHERE id = ?", (lease, row["id"]))
        return [Delivery(self._record(row), lease) for row in rows if not self._expired(row)]

    async def update_webhook(
        self, job_id: str, webhook: dict[str, Any], due_at: float | None, *, lease: float
    ) -> None:
        await self._run(self._update_webhook, job_id, webhook, due_at, lease)
        self.hub.notify(job_topic(job_id))

    def _update_webhook(
        self, job_id: str, webhook: dict[str, Any], due_at: float | None, lease: float
    ) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE jobs SET webhook = ?,"
                " webhook_due = CASE WHEN webhook_due = ? THEN ? ELSE webhook_due END"
                " WHERE id = ?",
                (json.dumps(webhook), lease, due_at, job_id),
            )

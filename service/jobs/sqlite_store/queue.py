"""The job queue in SQLite: ``jobs`` (a row a job, with its lease and webhook columns),
``blobs`` (inputs and results: small ones in the row, big ones in the blob store,
``service.jobs.blobs``), ``checkpoints``, ``idempotency`` and ``owners`` (when each owner
was last served, per model and priority: the fair order).

A big blob is written to the blob store before the transaction that names it (off the
store's thread, outside the breaker) and deleted when that transaction fails or finds
the job finished already; a transaction that stops naming a blob deletes it once it
commits.

Every change is one ``BEGIN IMMEDIATE`` transaction on the store's thread (the ``_tx``
methods); the queue order is ``seq``, the row's place in the order of creation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

from service.jobs import shared
from service.jobs.blobs import (
    FILE_MIN_BYTES,
    BlobRef,
    HeldBytes,
    PackedSource,
    StoredBlob,
    forget_blob,
    forgotten_if_refused,
)
from service.jobs.changes import work_topic
from service.jobs.records import (
    CANCELLED,
    FAILED,
    FINAL_STATES,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    JobRecord,
)
from service.jobs.roles import JobQueue
from service.jobs.sqlite_store.connection import COLUMNS, SqliteBackend, db_value
from service.priorities import ASYNC_PRIORITIES

_UNFINISHED = (QUEUED, RUNNING)
_BLOB_COLUMNS = "id, kind, data, file, checksum"

logger = logging.getLogger("atelier.jobs")


class SqliteJobQueue(SqliteBackend, JobQueue):
    """:class:`~service.jobs.roles.JobQueue` in SQLite."""

    # ------------------------------------------------------------------ API side
    async def _occupancy(self, owner: str) -> shared.Occupancy:
        return await self._run(self._counts, owner)

    def _counts(self, owner: str, db: sqlite3.Connection | None = None) -> shared.Occupancy:
        total, mine, in_bytes = (
            (self._db if db is None else db)
            .execute(
                "SELECT COUNT(*) FILTER (WHERE priority IN (?, ?)),"
                " COUNT(*) FILTER (WHERE priority IN (?, ?) AND owner = ?),"
                " COALESCE(SUM(input_bytes), 0)"
                " FROM jobs WHERE state IN (?, ?)",
                (*ASYNC_PRIORITIES, *ASYNC_PRIORITIES, owner, *_UNFINISHED),
            )
            .fetchone()
        )
        return shared.Occupancy(mine, total, in_bytes)

    async def _create(self, job: shared.Submission) -> tuple[JobRecord, bool]:
        blob = await self._write_blob(job.record.id, "in", (job.payload,))
        async with forgotten_if_refused(self.blobs, blob):
            record, created = await self._run(
                self._create_tx, job, blob, payload_bytes=0 if blob else len(job.payload)
            )
        if not created:  # an idempotent replay: the earlier job has its own input
            await forget_blob(self.blobs, blob)
        return record, created

    async def _write_blob(self, job_id: str, kind: str, pieces: Sequence[bytes]) -> BlobRef | None:
        """A big blob (the concatenation of ``pieces``) written to the blob store, off the
        store's thread and outside the breaker (its time is the disk's, not the
        database's); None: small, kept in the row."""
        if sum(len(piece) for piece in pieces) < FILE_MIN_BYTES:
            return None
        return await asyncio.to_thread(self.blobs.write, job_id, kind, pieces)

    async def _read_blob(self, blob: BlobRef) -> bytes | None:
        return await asyncio.to_thread(self.blobs.read, blob)

    @staticmethod
    def _blob_row(job_id: str, kind: str, data: bytes, blob: BlobRef | None) -> tuple[Any, ...]:
        """A ``blobs`` row: the bytes, or the file that holds them."""
        if blob is None:
            return (job_id, kind, data, None, None)
        return (job_id, kind, b"", blob.name, blob.checksum)

    @staticmethod
    def _held(row: sqlite3.Row | None) -> bytes | BlobRef | None:
        """A ``blobs`` row's bytes, or the file to read them from."""
        if row is None:
            return None
        if row["file"] is not None:
            return BlobRef(row["file"], row["checksum"])
        return bytes(row["data"])

    def _create_tx(self, job: shared.Submission, blob: BlobRef | None) -> tuple[JobRecord, bool]:
        record, now = job.record, self._clock()
        with self._write() as db:
            if job.idempotency is not None:
                key, fingerprint = job.idempotency
                earlier = db.execute(
                    "SELECT fingerprint, job_id FROM idempotency"
                    " WHERE owner = ? AND key = ? AND expires_at > ?",
                    (record.owner, key, now),
                ).fetchone()
                if earlier is not None:
                    if earlier["fingerprint"] != fingerprint:
                        raise shared.IdempotencyKeyReused()
                    row = self._row(db, earlier["job_id"])
                    if row is None:
                        raise shared.IdempotentJobExpired()
                    return self._record(row), False
            occupancy = self._counts(record.owner, db)
            shared.admit(
                self.limits,
                occupancy,
                job.owner_max_jobs,
                priority=record.priority,
                size=len(job.payload),
            )
            lease_until = None
            if job.run_by is not None:  # held at once by a worker of this process, as claimed
                shared.lease_to(record, job.run_by[0], now)
                lease_until = now + job.run_by[1]
            values = {name: db_value(getattr(record, name)) for name in COLUMNS}
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            values |= {
                "seq": seq,
                "lease_until": lease_until,
                "webhook_progress_next": 0.0 if job.wants("progress") else None,
            }
            db.execute(
                f"INSERT INTO jobs ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                tuple(values.values()),
            )
            db.execute(
                f"INSERT INTO blobs ({_BLOB_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                self._blob_row(record.id, "in", job.payload, blob),
            )
            if job.idempotency is not None:
                expires_at = now + self.limits.idempotency_ttl_s
                db.execute(
                    "INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?, ?)",
                    (record.owner, *job.idempotency, record.id, expires_at),
                )
        return record, True

    async def get(self, job_id: str) -> JobRecord | None:
        return await self._run(self._get, job_id)

    def _get(self, job_id: str) -> JobRecord | None:
        row = self._row(self._db, job_id)
        return None if row is None else self._record(row)

    async def result(self, job_id: str) -> bytes | None:
        held = await self._run(self._result, job_id, payload_bytes=shared.RESULT_BYTES)
        return await self._read_blob(held) if isinstance(held, BlobRef) else held

    async def result_source(self, job_id: str) -> PackedSource | None:
        held = await self._run(self._result, job_id, payload_bytes=shared.RESULT_BYTES)
        if isinstance(held, BlobRef):
            return StoredBlob(self.blobs, held)
        return None if held is None else HeldBytes(held)

    def _result(self, job_id: str) -> bytes | BlobRef | None:
        if self._row(self._db, job_id) is None:
            return None
        return self._held(
            self._db.execute(
                f"SELECT {_BLOB_COLUMNS} FROM blobs WHERE id = ? AND kind = 'out'", (job_id,)
            ).fetchone()
        )

    async def _cancel(self, job_id: str) -> JobRecord | None:
        return await self._run(self._cancel_tx, job_id)

    def _cancel_tx(self, job_id: str) -> JobRecord | None:
        with self._write() as db:
            row = self._row(db, job_id)
            if row is None:
                return None
            if row["state"] == QUEUED:
                self._finish_in(db, row, shared.Outcome(CANCELLED, error=shared.cancelled_error()))
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
        self._drop_blobs(db, job_id)
        db.execute("DELETE FROM checkpoints WHERE job_id = ?", (job_id,))

    async def jobs_of(self, owner: str, limit: int) -> list[JobRecord]:
        return await self._run(self._jobs_of, owner, limit)

    def _jobs_of(self, owner: str, limit: int) -> list[JobRecord]:
        rows = self._db.execute(
            "SELECT * FROM jobs WHERE owner = ? AND priority IN (?, ?) ORDER BY seq DESC LIMIT ?",
            (owner, *ASYNC_PRIORITIES, limit * 2),
        ).fetchall()
        return [self._record(r) for r in rows if not self._expired(r)][:limit]

    # --------------------------------------------------------------- worker side
    async def _claim(
        self, worker: str, model: str, order: tuple[str, ...], lease_s: float, skip: frozenset[str]
    ) -> shared.Claim | None:
        claim = await self._run(self._claim_tx, worker, model, order, lease_s, skip)
        if claim is None or claim.input_file is None:
            return claim
        payload = await self._read_blob(claim.input_file)
        if payload is None:  # gone or damaged: the work cannot be rebuilt from it
            logger.error("a job's input file is missing", extra={"job_id": claim.record.id})
        return dataclasses.replace(claim, payload=payload or b"", input_file=None)

    def _claim_tx(
        self, worker: str, model: str, order: tuple[str, ...], lease_s: float, skip: frozenset[str]
    ) -> shared.Claim | None:
        now = self._clock()
        with self._write() as db:
            for priority in order:
                heads = [
                    head
                    for head in db.execute(
                        "SELECT owner, MIN(seq) AS first FROM jobs"
                        " WHERE state = ? AND model = ? AND priority = ? GROUP BY owner",
                        (QUEUED, model, priority),
                    )
                    if head["owner"] not in skip
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
                shared.lease_to(record, worker, now)
                self._update(
                    db,
                    record.id,
                    state=RUNNING,
                    worker=worker,
                    attempts=record.attempts,
                    started_at=record.started_at,
                    lease_until=now + lease_s,
                )
                held = self._held(
                    db.execute(
                        f"SELECT {_BLOB_COLUMNS} FROM blobs WHERE id = ? AND kind = 'in'",
                        (record.id,),
                    ).fetchone()
                )
                more = db.execute(
                    "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = ? AND model = ?)",
                    (QUEUED, model),
                ).fetchone()[0]
                if isinstance(held, BlobRef):  # read after the transaction, off its thread
                    return shared.Claim(record, b"", bool(more), input_file=held)
                return shared.Claim(record, held or b"", bool(more))
        return None

    async def _renew(
        self, worker: str, job_ids: list[str], lease_s: float
    ) -> tuple[set[str], set[str]]:
        return await self._run(self._renew_tx, worker, job_ids, lease_s)

    def _renew_tx(
        self, worker: str, job_ids: list[str], lease_s: float
    ) -> tuple[set[str], set[str]]:
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

    async def _set_progress(self, job_id: str, worker: str, step: int, total: int) -> None:
        await self._run(self._set_progress_tx, job_id, worker, step, total)

    def _set_progress_tx(self, job_id: str, worker: str, step: int, total: int) -> None:
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
        return await self._run(self._checkpoint, job_id, name, payload_bytes=shared.RESULT_BYTES)

    def _checkpoint(self, job_id: str, name: str) -> bytes | None:
        row = self._db.execute(
            "SELECT data FROM checkpoints WHERE job_id = ? AND name = ?", (job_id, name)
        ).fetchone()
        return None if row is None else bytes(row["data"])

    async def _finish(self, job_id: str, outcome: shared.Outcome) -> bool:
        result = outcome.result
        blob = None if result is None else await self._write_blob(job_id, "out", result.pieces)
        size = 0 if result is None or blob is not None else result.size
        async with forgotten_if_refused(self.blobs, blob):
            done = await self._run(self._finish_tx, job_id, outcome, blob, payload_bytes=size)
        if not done:  # finished before (a rerun's outcome came first)
            await forget_blob(self.blobs, blob)
        return done

    def _finish_tx(self, job_id: str, outcome: shared.Outcome, blob: BlobRef | None) -> bool:
        with self._write() as db:
            row = self._row(db, job_id)
            if row is None or row["state"] in FINAL_STATES:
                return False
            if outcome.progress is not None:
                db.execute(
                    "UPDATE jobs SET step = ?, total = ? WHERE id = ?", (*outcome.progress, job_id)
                )
            self._finish_in(db, row, outcome, blob)
            return True

    def _finish_in(
        self,
        db: sqlite3.Connection,
        row: sqlite3.Row,
        outcome: shared.Outcome,
        blob: BlobRef | None = None,
    ) -> None:
        """Finish the job of ``row`` (not final) inside the transaction ``db`` (``blob``:
        where its result was written, when it is big)."""
        job_id, now, result = row["id"], self._clock(), outcome.result
        webhook = json.loads(row["webhook"]) if row["webhook"] else None
        self._update(
            db,
            job_id,
            state=outcome.state,
            finished_at=now,
            error=outcome.error,
            result_bytes=result.size if result is not None else 0,
            lease_until=None,
            webhook_due=now if shared.wants_webhook(webhook, "completed") else None,
        )
        if outcome.state == SUCCEEDED:
            db.execute("UPDATE jobs SET step = total WHERE id = ?", (job_id,))
        self._drop_blobs(db, job_id, "in")
        db.execute("DELETE FROM checkpoints WHERE job_id = ?", (job_id,))  # a final job needs none
        if result is not None:
            self._drop_blobs(db, job_id, "out")
            db.execute(
                f"INSERT INTO blobs ({_BLOB_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                self._blob_row(job_id, "out", b"" if blob else result.join(), blob),
            )
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

    async def _release(self, worker: str, job_ids: list[str]) -> None:
        await self._run(self._release_tx, worker, job_ids)

    def _release_tx(self, worker: str, job_ids: list[str]) -> None:
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

    async def reap(self) -> int:
        requeued, models = await self._run(self._reap)
        await self.give_back_space()
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
                    error = shared.lost_error(row["attempts"])
                    self._finish_in(db, row, shared.Outcome(FAILED, error=error))
                else:
                    self._update(db, row["id"], state=QUEUED, worker=None, lease_until=None)
                    requeued += 1
                    models.add(row["model"])
            late = db.execute(
                "SELECT * FROM jobs WHERE state = ? AND deadline_at <= ?",
                (QUEUED, now),
            ).fetchall()
            for row in late:
                self._finish_in(db, row, shared.Outcome(FAILED, error=shared.late_error()))
            expired = db.execute(
                "SELECT id FROM jobs WHERE finished_at <= ?",
                (now - self.limits.ttl_s,),
            ).fetchall()
            for row in expired:
                self._forget(db, row["id"])
            db.execute("DELETE FROM idempotency WHERE expires_at <= ?", (now,))
        return requeued, models

    async def queue_depths(self) -> dict[str, int]:
        return await self._run(self._queue_depths)

    def _queue_depths(self) -> dict[str, int]:
        rows = self._db.execute(
            "SELECT model, COUNT(*) FROM jobs WHERE state = ? GROUP BY model", (QUEUED,)
        ).fetchall()
        return {model: count for model, count in rows}

"""The embedded job store: one SQLite database file (WAL) under the state directory.

The default when no Redis is configured: a single ``atelier serve`` keeps the jobs it
accepted, and their results, across a restart or a crash. Processes on the same host
may share the file (``atelier worker`` beside ``atelier serve``): every write is one
``BEGIN IMMEDIATE`` transaction, and each process notices the others' writes through
``PRAGMA data_version`` (polled every ``poll_s``) and wakes its waiters.

One module a role, on one ``connection`` (the schema, the store's own thread):
``queue`` (the jobs), ``tokens`` (the rate limits), ``directory`` (the workers'
models), ``outbox`` (the webhook deliveries).
"""

from __future__ import annotations

from service.jobs.sqlite_store.connection import SqliteBackend
from service.jobs.sqlite_store.directory import SqliteModelDirectory
from service.jobs.sqlite_store.outbox import SqliteWebhookOutbox
from service.jobs.sqlite_store.queue import SqliteJobQueue
from service.jobs.sqlite_store.tokens import SqliteRateLimits
from service.jobs.store import JobStore

__all__ = ["SqliteBackend", "SqliteJobStore"]


class SqliteJobStore(
    SqliteJobQueue, SqliteRateLimits, SqliteModelDirectory, SqliteWebhookOutbox, JobStore
):
    """Jobs in the SQLite file ``path``: every role on one connection (the arguments:
    :class:`~service.jobs.sqlite_store.connection.SqliteBackend`)."""

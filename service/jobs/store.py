"""The job store: four roles, two back ends (SQLite on one host, Redis across hosts).

A store keeps jobs (``service.jobs.records``), the queue they wait in, each owner's
request tokens, the directory of the models live workers serve, and the outbox of the
webhook deliveries the jobs' changes make due. Each of these is a role with its own
interface and guarantees (``service.jobs.roles``: :class:`JobQueue`,
:class:`RateLimits`, :class:`ModelDirectory`, :class:`WebhookOutbox`); :class:`JobStore`
is the four on one back end, and a caller that needs one role takes that role.

``sqlite_store.SqliteJobStore`` and ``redis_store.RedisJobStore`` implement every role,
each in a module of its own; what both share (the admission rule, the values a store
takes and hands out, expiry, leases, the errors) is written once in
``service.jobs.shared``, and the change notifications in ``service.jobs.changes``.

Change notification: a store calls ``hub.notify(topic)`` for every change it makes or
hears of (topics from :func:`job_topic`, :func:`cancel_topic`, :func:`done_topic`,
:func:`work_topic`; a change this process made is announced here at once, without
waiting for the store's own broadcast, and a job it finished with ``hub.finished``,
which hands the result it wrote to the waiters here), so waiters (event streams,
synchronous requests, workers) wake without polling; waiters still re-read after a
timeout, so a lost notification costs latency, never correctness.
"""

from __future__ import annotations

from service.errors import StoreFull, StoreUnavailable
from service.jobs.changes import (
    ChangeHub,
    Watch,
    cancel_topic,
    done_topic,
    job_topic,
    work_topic,
)
from service.jobs.roles import Backend, JobQueue, ModelDirectory, RateLimits, WebhookOutbox
from service.jobs.shared import (
    Claim,
    Delivery,
    IdempotencyKeyReused,
    IdempotentJobExpired,
    Refused,
    StoreLimits,
    cancelled_error,
    late_error,
    lost_error,
)

__all__ = [
    "Backend",
    "ChangeHub",
    "Claim",
    "Delivery",
    "IdempotencyKeyReused",
    "IdempotentJobExpired",
    "JobQueue",
    "JobStore",
    "ModelDirectory",
    "RateLimits",
    "Refused",
    "StoreFull",  # the store's errors are the service's own (503 and more)
    "StoreLimits",
    "StoreUnavailable",
    "Watch",
    "WebhookOutbox",
    "cancel_topic",
    "cancelled_error",
    "done_topic",
    "job_topic",
    "late_error",
    "lost_error",
    "work_topic",
]


class JobStore(JobQueue, RateLimits, ModelDirectory, WebhookOutbox):
    """Where jobs live: the four roles on one back end (see the module docstring, and
    each role's for its guarantees)."""

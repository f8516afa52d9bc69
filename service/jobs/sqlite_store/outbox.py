"""The webhook outbox in SQLite: the ``jobs`` rows' ``webhook_due`` (when a delivery is
due, NULL: none) and ``webhook_progress_next`` (the earliest next progress delivery).

The queue's transactions set them in the step that makes a delivery due (a job's
finish, its progress); taking due deliveries moves their due time to the lease's end.
"""

from __future__ import annotations

import json
from typing import Any

from service.jobs.roles import WebhookOutbox
from service.jobs.shared import Delivery
from service.jobs.sqlite_store.connection import SqliteBackend


class SqliteWebhookOutbox(SqliteBackend, WebhookOutbox):
    """:class:`~service.jobs.roles.WebhookOutbox` in SQLite."""

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

    async def _update_webhook(
        self, job_id: str, webhook: dict[str, Any], due_at: float | None, lease: float
    ) -> None:
        await self._run(self._update_webhook_tx, job_id, webhook, due_at, lease)

    def _update_webhook_tx(
        self, job_id: str, webhook: dict[str, Any], due_at: float | None, lease: float
    ) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE jobs SET webhook = ?,"
                " webhook_due = CASE WHEN webhook_due = ? THEN ? ELSE webhook_due END"
                " WHERE id = ?",
                (json.dumps(webhook), lease, due_at, job_id),
            )

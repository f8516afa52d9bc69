"""The model directory in SQLite: ``workers`` (each worker's models and when its
advertisement ends) and ``models`` (every model's details)."""

from __future__ import annotations

import json
from typing import Any

from service.jobs.roles import ModelDirectory
from service.jobs.sqlite_store.connection import SqliteBackend


class SqliteModelDirectory(SqliteBackend, ModelDirectory):
    """:class:`~service.jobs.roles.ModelDirectory` in SQLite."""

    async def publish_models(self, worker: str, models: dict[str, Any], ttl_s: float) -> None:
        await self._run(self._publish_models, worker, models, ttl_s)

    def _publish_models(self, worker: str, models: dict[str, Any], ttl_s: float) -> None:
        """Advertise ``worker``'s models, and prune the workers whose advertisement ran out."""
        now = self._clock()
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO workers VALUES (?, ?, ?)",
                (worker, json.dumps(sorted(models)), now + ttl_s),
            )
            for name, details in models.items():
                db.execute(
                    "INSERT OR REPLACE INTO models VALUES (?, ?)", (name, json.dumps(details))
                )
            db.execute("DELETE FROM workers WHERE expires_at <= ?", (now,))

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

"""Each owner's request rate in SQLite: ``tokens``, a GCRA arrival time per owner."""

from __future__ import annotations

from service.jobs.roles import RateLimits
from service.jobs.shared import gcra
from service.jobs.sqlite_store.connection import SqliteBackend


class SqliteRateLimits(SqliteBackend, RateLimits):
    """:class:`~service.jobs.roles.RateLimits` in SQLite."""

    async def take_token(self, owner: str, rate_per_s: float, burst: float) -> float:
        return await self._run(self._take_token, owner, rate_per_s, burst)

    def _take_token(self, owner: str, rate_per_s: float, burst: float) -> float:
        with self._write() as db:
            row = db.execute("SELECT tat FROM tokens WHERE owner = ?", (owner,)).fetchone()
            wait, tat = gcra(None if row is None else row["tat"], self._clock(), rate_per_s, burst)
            if not wait:
                db.execute("INSERT OR REPLACE INTO tokens VALUES (?, ?)", (owner, tat))
            return wait

"""The model directory on Redis: ``workers`` (each live worker's models and when its
advertisement ends) and ``models`` (every model's details), two hashes."""

from __future__ import annotations

import json
from typing import Any

from service.jobs.redis_store.connection import RedisBackend, text
from service.jobs.roles import ModelDirectory


class RedisModelDirectory(RedisBackend, ModelDirectory):
    """:class:`~service.jobs.roles.ModelDirectory` on Redis."""

    async def publish_models(self, worker: str, models: dict[str, Any], ttl_s: float) -> None:
        """Advertise ``worker``'s models, and prune the workers whose advertisement ran out."""
        now = await self.now()
        entry = json.dumps({"models": sorted(models), "expires_at": now + ttl_s})
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._key("workers"), worker, entry)
            if models:
                pipe.hset(
                    self._key("models"),
                    mapping={name: json.dumps(details) for name, details in models.items()},
                )
            await self._call(pipe.execute())
        dead = [
            name for name, entry in (await self._advertised()).items() if entry["expires_at"] <= now
        ]
        if dead:
            await self._call(self._redis.hdel(self._key("workers"), *dead))

    async def withdraw(self, worker: str) -> None:
        await self._call(self._redis.hdel(self._key("workers"), worker))

    async def models(self) -> dict[str, tuple[dict[str, Any], bool]]:
        workers = await self._advertised()
        details = await self._call(self._redis.hgetall(self._key("models")))
        now = await self.now()
        served: set[str] = set()
        for entry in workers.values():
            if entry["expires_at"] > now:
                served.update(entry["models"])
        return {
            text(name): (json.loads(raw), text(name) in served) for name, raw in details.items()
        }

    async def _advertised(self) -> dict[bytes, dict[str, Any]]:
        """Every worker's advertisement, live or not: ``{"models", "expires_at"}``."""
        workers = await self._call(self._redis.hgetall(self._key("workers")))
        return {name: json.loads(raw) for name, raw in workers.items()}

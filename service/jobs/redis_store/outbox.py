"""The webhook outbox on Redis: ``webhooks``, a zset of jobs by when a delivery is due.

The queue's scripts add to it in the step that makes a delivery due (a job's finish,
when its hash says ``wh_completed``; its progress, once ``wh_progress_next`` has
passed); taking due deliveries moves their due time to the lease's end.
"""

from __future__ import annotations

import json
from typing import Any

from service.jobs.redis_store.connection import ALLOW_OOM, RedisBackend, text
from service.jobs.roles import WebhookOutbox
from service.jobs.shared import Delivery

_DUE_WEBHOOKS = (
    ALLOW_OOM
    + r"""
local lease, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', p .. 'webhooks', '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(due) do redis.call('ZADD', p .. 'webhooks', now + lease, id) end
return {string.format('%.17g', now + lease), due}
"""
)

_UPDATE_WEBHOOK = (
    ALLOW_OOM
    + r"""
local id, webhook, due, lease = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local key = p .. 'job:' .. id
if redis.call('EXISTS', key) == 0 then return 0 end
redis.call('HSET', key, 'webhook', webhook)
local current = redis.call('ZSCORE', p .. 'webhooks', id)
if current and tonumber(current) == lease then
  if due == '' then redis.call('ZREM', p .. 'webhooks', id)
  else redis.call('ZADD', p .. 'webhooks', tonumber(due), id) end
end
changed('job:' .. id)
return 1
"""
)


class RedisWebhookOutbox(RedisBackend, WebhookOutbox):
    """:class:`~service.jobs.roles.WebhookOutbox` on Redis."""

    async def due_webhooks(self, lease_s: float, limit: int) -> list[Delivery]:
        lease, ids = await self._script(_DUE_WEBHOOKS, repr(lease_s), limit)
        records = [await self._read(text(job_id)) for job_id in ids]
        return [Delivery(r, float(lease)) for r in records if r is not None]

    async def _update_webhook(
        self, job_id: str, webhook: dict[str, Any], due_at: float | None, lease: float
    ) -> None:
        due = "" if due_at is None else repr(due_at)
        await self._script(_UPDATE_WEBHOOK, job_id, json.dumps(webhook), due, repr(lease))

"""Each owner's request rate on Redis: a GCRA bucket per owner, one script a request."""

from __future__ import annotations

from service.jobs.redis_store.connection import ALLOW_OOM, RedisBackend
from service.jobs.roles import RateLimits

#: Mirrors ``shared.gcra``: ``tat:{owner}`` is the theoretical arrival time, expiring
#: a second after the bucket is full again (a few bytes an owner: run when Redis is full).
_TOKEN = (
    ALLOW_OOM
    + r"""
local key, interval, burst = p .. 'tat:' .. ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', key) or '0') or 0
if tat < now then tat = now end
local wait = tat + interval - now - burst * interval
if wait > 0 then return tostring(wait) end
redis.call('SET', key, tostring(tat + interval), 'PX', math.ceil((tat + interval - now) * 1000) + 1000)
return '0'
"""
)


class RedisRateLimits(RedisBackend, RateLimits):
    """:class:`~service.jobs.roles.RateLimits` on Redis."""

    async def take_token(self, owner: str, rate_per_s: float, burst: float) -> float:
        return float(await self._script(_TOKEN, owner, repr(1.0 / rate_per_s), repr(burst)))

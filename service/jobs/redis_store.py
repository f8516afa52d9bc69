"""The shared job store: Redis (>= 6.2) or Valkey, for several replicas and workers.

Every replica reads and writes the same jobs, so any replica answers ``GET``,
``DELETE`` and the event stream of any job, and workers on other hosts pull from the
same queue. Each state change is one Lua script (atomic on the server, timed by the
server's clock, so replicas need not agree on the time); changes are announced on one
pub/sub channel that every process listens to and forwards to its :class:`ChangeHub`.

Keys (``prefix`` is ``atelier:`` by default)::

    job:{id}                     hash: the JobRecord's fields (+ webhook flags)
    in:{id}, out:{id}            the input and the result blobs
    ckpt:{id}                    hash: the running job's checkpoints by name (expiring
                                 after ``ttl_s`` without a put, should one be orphaned)
    q:{model}:{priority}:{owner} list: the owner's queued job ids, oldest first
    owners:{model}:{priority}    zset: owners with queued jobs, by when last served
    leases                       zset: running job ids by lease expiry
    deadlines                    zset: queued job ids by deadline
    finished                     zset: finished job ids by finish time
    owner:{owner}                zset: the owner's recent async jobs by creation time
    unfinished, queued           hashes: unfinished async jobs per owner (and '' for all);
                                 queued jobs per model
    inbytes, outbytes, turn      counters: queued input bytes, held result bytes, fairness
    idem:{owner}:{sha256(key)}   "fingerprint job_id", expiring after the retention
    webhooks                     zset: jobs with a webhook delivery due, by due time
    workers, models              hashes: live workers' models; every model's details
    tat:{owner}                  the owner's rate limiter (GCRA theoretical arrival time)
    changes                      pub/sub channel: "job:{id}", "cancel:{id}", "work:{model}"

Keys are not spread over a cluster (one server, or a primary with replicas / Sentinel).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Awaitable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.jobs.records import RUNNING, JobRecord
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
    late_error,
    lost_error,
    work_topic,
)

logger = logging.getLogger("atelier.jobs.redis")

# Shared Lua: the server's clock and the two ways a job leaves (finished, forgotten).
_PRELUDE = r"""
local p = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local function changed(topic) redis.call('PUBLISH', p .. 'changes', topic) end
local function final(state)
  return state == 'succeeded' or state == 'failed' or state == 'cancelled'
end
local function unqueue_owner(model, prio, owner)
  if redis.call('LLEN', p .. 'q:' .. model .. ':' .. prio .. ':' .. owner) == 0 then
    redis.call('ZREM', p .. 'owners:' .. model .. ':' .. prio, owner)
  end
end
local function requeue(id, model, prio, owner)
  redis.call('HSET', p .. 'job:' .. id, 'state', 'queued', 'worker', '')
  redis.call('ZREM', p .. 'leases', id)
  redis.call('LPUSH', p .. 'q:' .. model .. ':' .. prio .. ':' .. owner, id)
  redis.call('ZADD', p .. 'owners:' .. model .. ':' .. prio, 'NX', 0, owner)
  redis.call('HINCRBY', p .. 'queued', model, 1)
  local deadline = redis.call('HGET', p .. 'job:' .. id, 'deadline_at')
  if deadline and deadline ~= '' then redis.call('ZADD', p .. 'deadlines', deadline, id) end
  changed('work:' .. model)
  changed('job:' .. id)
end
local function forget(id)
  local key = p .. 'job:' .. id
  local owner = redis.call('HGET', key, 'owner')
  local size = tonumber(redis.call('HGET', key, 'result_bytes') or '0') or 0
  if redis.call('EXISTS', p .. 'out:' .. id) == 1 then
    redis.call('DECRBY', p .. 'outbytes', size)
  end
  redis.call('DEL', key, p .. 'out:' .. id, p .. 'in:' .. id, p .. 'ckpt:' .. id)
  redis.call('ZREM', p .. 'finished', id)
  redis.call('ZREM', p .. 'webhooks', id)
  if owner then redis.call('ZREM', p .. 'owner:' .. owner, id) end
end
local function finish(id, state, err, result, has_result, budget, step, total)
  local key = p .. 'job:' .. id
  local f = redis.call('HMGET', key, 'state', 'priority', 'owner', 'model', 'wh_completed')
  if not f[1] or final(f[1]) then return 0 end
  if step and step ~= '' then redis.call('HSET', key, 'step', step, 'total', total) end
  if f[1] == 'queued' then
    redis.call('LREM', p .. 'q:' .. f[4] .. ':' .. f[2] .. ':' .. f[3], 1, id)
    unqueue_owner(f[4], f[2], f[3])
    redis.call('HINCRBY', p .. 'queued', f[4], -1)
  end
  local size = 0
  if has_result == '1' then size = string.len(result) end
  redis.call('HSET', key, 'state', state, 'finished_at', tostring(now), 'error', err,
             'result_bytes', size)
  if state == 'succeeded' then
    redis.call('HSET', key, 'step', redis.call('HGET', key, 'total') or '0')
  end
  local inkey = p .. 'in:' .. id
  redis.call('DECRBY', p .. 'inbytes', redis.call('STRLEN', inkey))
  redis.call('DEL', inkey, p .. 'ckpt:' .. id)  -- a final job needs no checkpoints
  if f[2] == 'background' then
    redis.call('HINCRBY', p .. 'unfinished', f[3], -1)
    redis.call('HINCRBY', p .. 'unfinished', '', -1)
  end
  redis.call('ZREM', p .. 'leases', id)
  redis.call('ZREM', p .. 'deadlines', id)
  redis.call('ZADD', p .. 'finished', now, id)
  if f[5] == '1' then redis.call('ZADD', p .. 'webhooks', now, id) end
  if has_result == '1' then
    redis.call('SET', p .. 'out:' .. id, result)
    local held = redis.call('INCRBY', p .. 'outbytes', size)
    local oldest = redis.call('ZRANGE', p .. 'finished', 0, 64)
    for _, other in ipairs(oldest) do
      if held <= budget then break end
      if other ~= id then
        held = held - (tonumber(redis.call('HGET', p .. 'job:' .. other, 'result_bytes') or '0') or 0)
        forget(other)
      end
    end
  end
  changed('job:' .. id)
  changed('done:' .. id)
  return 1
end
"""

_CREATE = r"""
local id, owner, model, prio = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local owner_max, max_jobs, in_max = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local payload, idem, fp, idem_ttl = ARGV[9], ARGV[10], ARGV[11], tonumber(ARGV[12])
local deadline, worker, lease = ARGV[13], ARGV[14], tonumber(ARGV[15])
if idem ~= '' then
  local earlier = redis.call('GET', idem)
  if earlier then
    local sep = string.find(earlier, ' ', 1, true)
    local job = string.sub(earlier, sep + 1)
    if string.sub(earlier, 1, sep - 1) ~= fp then return {'reused'} end
    if redis.call('EXISTS', p .. 'job:' .. job) == 0 then return {'expired'} end
    return {'replay', job}
  end
end
local size = string.len(payload)
if prio == 'background' then
  local mine = tonumber(redis.call('HGET', p .. 'unfinished', owner) or '0') or 0
  if mine >= owner_max then return {'refused', 'key_max_jobs', tostring(mine)} end
  local all = tonumber(redis.call('HGET', p .. 'unfinished', '') or '0') or 0
  if all >= max_jobs then return {'refused', 'max_jobs', tostring(all)} end
end
local held = tonumber(redis.call('GET', p .. 'inbytes') or '0') or 0
if held + size > in_max then return {'refused', 'job_inputs_max_bytes', tostring(held)} end
local key = p .. 'job:' .. id
local fields = {}
for i = 16, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', key, unpack(fields))
redis.call('HSET', key, 'created_at', tostring(now), 'input_bytes', size)
redis.call('SET', p .. 'in:' .. id, payload)
redis.call('INCRBY', p .. 'inbytes', size)
if prio == 'background' then
  redis.call('HINCRBY', p .. 'unfinished', owner, 1)
  redis.call('HINCRBY', p .. 'unfinished', '', 1)
  redis.call('ZADD', p .. 'owner:' .. owner, now, id)
  redis.call('ZREMRANGEBYRANK', p .. 'owner:' .. owner, 0, -201)
end
if idem ~= '' then redis.call('SET', idem, fp .. ' ' .. id, 'EX', idem_ttl) end
if worker ~= '' then  -- held at once by a worker of the creating process, as a claim would
  redis.call('HSET', key, 'state', 'running', 'worker', worker, 'attempts', 1,
             'started_at', tostring(now))
  redis.call('ZADD', p .. 'leases', now + lease, id)
  return {'created', tostring(now)}
end
if deadline ~= '' then redis.call('ZADD', p .. 'deadlines', tonumber(deadline), id) end
redis.call('RPUSH', p .. 'q:' .. model .. ':' .. prio .. ':' .. owner, id)
redis.call('ZADD', p .. 'owners:' .. model .. ':' .. prio, 'NX', 0, owner)
redis.call('HINCRBY', p .. 'queued', model, 1)
changed('work:' .. model)
return {'created', tostring(now)}
"""

_CLAIM = r"""
local worker, model, lease = ARGV[2], ARGV[3], tonumber(ARGV[4])
local skipped, first_priority = {}, 6 + tonumber(ARGV[5])
for i = 6, first_priority - 1 do skipped[ARGV[i]] = true end
for i = first_priority, #ARGV do
  local prio = ARGV[i]
  local owners = p .. 'owners:' .. model .. ':' .. prio
  while true do
    local owner = nil
    for _, candidate in ipairs(redis.call('ZRANGE', owners, 0, -1)) do
      if not skipped[candidate] then
        owner = candidate
        break
      end
    end
    if owner == nil then break end
    local queue = p .. 'q:' .. model .. ':' .. prio .. ':' .. owner
    local id = redis.call('LPOP', queue)
    if redis.call('LLEN', queue) == 0 then
      redis.call('ZREM', owners, owner)
    else
      redis.call('ZADD', owners, redis.call('INCR', p .. 'turn'), owner)
    end
    if id then
      redis.call('HINCRBY', p .. 'queued', model, -1)
      local key = p .. 'job:' .. id
      if redis.call('HGET', key, 'state') == 'queued' then
        redis.call('HINCRBY', key, 'attempts', 1)
        redis.call('HSET', key, 'state', 'running', 'worker', worker)
        if (redis.call('HGET', key, 'started_at') or '') == '' then
          redis.call('HSET', key, 'started_at', tostring(now))
        end
        redis.call('ZADD', p .. 'leases', now + lease, id)
        redis.call('ZREM', p .. 'deadlines', id)
        changed('job:' .. id)
        local more = redis.call('EXISTS', p .. 'owners:' .. model .. ':interactive',
                                p .. 'owners:' .. model .. ':background')
        return {redis.call('GET', p .. 'in:' .. id), redis.call('HGETALL', key), more}
      end
    end
  end
end
return false
"""

_RENEW = r"""
local worker, lease = ARGV[2], tonumber(ARGV[3])
local cancelled, lost = {}, {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local f = redis.call('HMGET', p .. 'job:' .. id, 'worker', 'state', 'cancel_requested')
  if f[1] == worker and f[2] == 'running' then
    redis.call('ZADD', p .. 'leases', 'XX', now + lease, id)
    if f[3] == '1' then cancelled[#cancelled + 1] = id end
  else
    lost[#lost + 1] = id
  end
end
return {cancelled, lost}
"""

_PROGRESS = r"""
local id, worker, step, total, every = ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local key = p .. 'job:' .. id
local f = redis.call('HMGET', key, 'worker', 'state', 'wh_progress_next')
if f[1] ~= worker or f[2] ~= 'running' then return 0 end
redis.call('HSET', key, 'step', step, 'total', total)
local next_at = tonumber(f[3] or '-1') or -1
if next_at >= 0 and now >= next_at then
  redis.call('ZADD', p .. 'webhooks', 'NX', now, id)
  redis.call('HSET', key, 'wh_progress_next', tostring(now + every))
end
changed('job:' .. id)
return 1
"""

_PUT_CHECKPOINT = r"""
local id, worker, name, data, ttl_ms = ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local f = redis.call('HMGET', p .. 'job:' .. id, 'worker', 'state')
if f[1] ~= worker or f[2] ~= 'running' then return 0 end
local key = p .. 'ckpt:' .. id
redis.call('HSET', key, name, data)
redis.call('PEXPIRE', key, ttl_ms)
return 1
"""

_FINISH = r"""
return finish(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9])
"""

_CANCEL = r"""
local id = ARGV[2]
local key = p .. 'job:' .. id
local state = redis.call('HGET', key, 'state')
if not state then return false end
if state == 'queued' then
  finish(id, 'cancelled', ARGV[3], '', '0', 0)
elseif state == 'running' then
  redis.call('HSET', key, 'cancel_requested', '1')
  changed('cancel:' .. id)
  changed('job:' .. id)
end
return redis.call('HGETALL', key)
"""

_DELETE = r"""
local state = redis.call('HGET', p .. 'job:' .. ARGV[2], 'state')
if not state or not final(state) then return 0 end
forget(ARGV[2])
return 1
"""

_RELEASE = r"""
local worker = ARGV[2]
for i = 3, #ARGV do
  local id = ARGV[i]
  local key = p .. 'job:' .. id
  local f = redis.call('HMGET', key, 'worker', 'state', 'model', 'priority', 'owner')
  if f[1] == worker and f[2] == 'running' then
    redis.call('HINCRBY', key, 'attempts', -1)
    requeue(id, f[3], f[4], f[5])
  end
end
return 1
"""

_REAP = r"""
local max_attempts, ttl, lost, late = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local requeued = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', p .. 'leases', '-inf', now, 'LIMIT', 0, 100)) do
  local key = p .. 'job:' .. id
  local f = redis.call('HMGET', key, 'state', 'attempts', 'model', 'priority', 'owner')
  redis.call('ZREM', p .. 'leases', id)
  if f[1] == 'running' then
    if (tonumber(f[2]) or 0) >= max_attempts then
      finish(id, 'failed', string.gsub(lost, '{attempts}', f[2]), '', '0', 0)
    else
      requeue(id, f[3], f[4], f[5])
      requeued = requeued + 1
    end
  end
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', p .. 'deadlines', '-inf', now, 'LIMIT', 0, 100)) do
  redis.call('ZREM', p .. 'deadlines', id)
  if redis.call('HGET', p .. 'job:' .. id, 'state') == 'queued' then
    finish(id, 'failed', late, '', '0', 0)
  end
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', p .. 'finished', '-inf', now - ttl, 'LIMIT', 0, 200)) do
  forget(id)
end
return requeued
"""

_TOKEN = r"""
local key, interval, burst = p .. 'tat:' .. ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', key) or '0') or 0
if tat < now then tat = now end
local wait = tat + interval - now - burst * interval
if wait > 0 then return tostring(wait) end
redis.call('SET', key, tostring(tat + interval), 'PX', math.ceil((tat + interval - now) * 1000) + 1000)
return '0'
"""

_DUE_WEBHOOKS = r"""
local lease, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', p .. 'webhooks', '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(due) do redis.call('ZADD', p .. 'webhooks', now + lease, id) end
return {string.format('%.17g', now + lease), due}
"""

_UPDATE_WEBHOOK = r"""
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

_NOW = r"""
return tostring(now)
"""


def _pairs(raw: list[Any]) -> dict[bytes, bytes]:
    """``HGETALL``'s flat list from a script as a dict."""
    return dict(zip(raw[::2], raw[1::2], strict=True))


def _text(value: bytes | str) -> str:
    """A reply of the client (bytes: it does not decode) as text."""
    return value.decode() if isinstance(value, bytes) else value


#: The size a result read is given time for (a print-size PNG is tens of MB).
RESULT_BYTES = 64 * 1024 * 1024


class RedisJobStore(JobStore):
    """Jobs in the Redis (or Valkey) server at ``url``.

    Args:
        url: ``redis://host:port/db`` (``rediss://`` for TLS).
        limits: the store's bounds.
        hub: where change notifications go.
        prefix: the key prefix (several deployments can share one server).
        webhook_progress_interval_s: least time between two progress webhooks of a job.
        timeout_s: a command's socket timeout (then ``StoreUnavailable``).
    """

    shared = True
    name = "the job store (Redis)"

    def __init__(
        self,
        url: str,
        limits: StoreLimits,
        hub: ChangeHub | None = None,
        *,
        prefix: str = "atelier:",
        webhook_progress_interval_s: float = 5.0,
        timeout_s: float = 5.0,
        call_timeout_s: float = 1.0,
        probe_interval_s: float = 0.5,
    ) -> None:
        super().__init__(
            limits, hub, call_timeout_s=call_timeout_s, probe_interval_s=probe_interval_s
        )
        self.url = url
        self.prefix = prefix
        self.webhook_progress_interval_s = webhook_progress_interval_s
        self._redis = aioredis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=min(timeout_s, 2.0),
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
            retry_on_error=[RedisConnectionError, RedisTimeoutError],
            health_check_interval=10,
        )
        self._scripts = {
            name: self._redis.register_script(_PRELUDE + body)
            for name, body in {
                "create": _CREATE,
                "claim": _CLAIM,
                "renew": _RENEW,
                "progress": _PROGRESS,
                "put_checkpoint": _PUT_CHECKPOINT,
                "finish": _FINISH,
                "cancel": _CANCEL,
                "delete": _DELETE,
                "release": _RELEASE,
                "reap": _REAP,
                "token": _TOKEN,
                "due_webhooks": _DUE_WEBHOOKS,
                "update_webhook": _UPDATE_WEBHOOK,
                "now": _NOW,
            }.items()
        }
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self._listener = asyncio.get_running_loop().create_task(self._listen())

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        await self.breaker.close()
        await self._redis.aclose()

    async def listening(self, timeout: float = 10.0) -> bool:
        """Whether the change listener is subscribed (tests wait on it)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._listening.wait()
        return self._listening.is_set()

    async def _listen(self) -> None:
        """Forward the ``changes`` channel to the hub; reconnect while Redis is away.

        Each (re)subscription wakes every waiter, so changes made while this process was
        not listening are read again.
        """
        backoff = 0.1
        channel = f"{self.prefix}changes"
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(channel)
                self._listening.set()
                self.hub.notify_all()
                backoff = 0.1
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None:
                        self.hub.notify(_text(message["data"]))
            except (RedisError, OSError) as exc:
                self._listening.clear()
                logger.warning(
                    "job change listener lost Redis; retrying", extra={"error": str(exc)}
                )
                self.hub.notify_all()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            finally:
                # typed in some redis-py releases, not in others: called through Any
                close: Any = pubsub.aclose
                with contextlib.suppress(Exception):
                    await close()

    async def _call(self, work: Awaitable[Any], *, payload_bytes: int = 0) -> Any:
        """Await a command through the breaker (``payload_bytes`` it moves add to its
        time); the client types its replies loosely (bytes, as it does not decode), so
        they are ``Any`` here and typed where they are read."""
        self.breaker.refuse_if_open(work)
        return await self.breaker.call(self._mapped(work), payload_bytes=payload_bytes)

    async def _mapped(self, work: Awaitable[Any]) -> Any:
        try:
            return await work
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailable(f"the job store (Redis) is unavailable: {exc}") from exc
        except ResponseError as exc:
            if str(exc).startswith(("MISCONF", "OOM", "READONLY")):
                raise StoreFull(f"the job store (Redis) refuses writes: {exc}") from exc
            raise

    async def _probe(self) -> None:
        await self._redis.ping()

    async def _script(self, name: str, *args: Any) -> Any:
        size = sum(len(arg) for arg in args if isinstance(arg, bytes | bytearray))
        work = self._scripts[name](args=[self.prefix, *args])
        return await self._call(work, payload_bytes=size)

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    def _alive(self, raw: dict[bytes, bytes]) -> JobRecord | None:
        if not raw:
            return None
        record = JobRecord.from_fields(raw)
        if record.finished_at is not None and record.finished_at + self.limits.ttl_s <= time.time():
            return None
        return record

    # ------------------------------------------------------------------ API side
    async def check_admission(self, owner: str, owner_max_jobs: int) -> None:
        mine, everyone = await self._call(self._redis.hmget(self._key("unfinished"), [owner, ""]))
        if int(mine or 0) >= owner_max_jobs:
            raise Refused(
                f"this key has {int(mine)} unfinished jobs, its limit (max_jobs of the key)",
                limit="key_max_jobs",
            )
        if int(everyone or 0) >= self.limits.max_jobs:
            raise Refused(
                f"too many jobs: {self.limits.max_jobs} are queued or running (max_jobs)",
                limit="max_jobs",
            )
        held = int(await self._call(self._redis.get(self._key("inbytes"))) or 0)
        if held >= self.limits.inputs_max_bytes:
            raise Refused(
                f"the queued inputs hold {self.limits.inputs_max_bytes} bytes "
                "(job_inputs_max_bytes)",
                limit="job_inputs_max_bytes",
            )

    async def create(
        self,
        record: JobRecord,
        payload: bytes,
        *,
        owner_max_jobs: int,
        idempotency: tuple[str, str] | None = None,
        run_by: tuple[str, float] | None = None,
    ) -> tuple[JobRecord, bool]:
        idem_key, fingerprint = "", ""
        if idempotency is not None:
            key, fingerprint = idempotency
            digest = hashlib.sha256(key.encode()).hexdigest()
            idem_key = self._key("idem", record.owner, digest)
            record.idempotency_key = key
        record.input_bytes = len(payload)
        fields = record.to_fields()
        wants = record.webhook["events"] if record.webhook else []
        fields["wh_completed"] = "1" if "completed" in wants else "0"
        fields["wh_progress_next"] = "0" if "progress" in wants else "-1"
        flat = [item for pair in fields.items() for item in pair]
        reply = await self._script(
            "create",
            record.id,
            record.owner,
            record.model,
            record.priority,
            owner_max_jobs,
            self.limits.max_jobs,
            self.limits.inputs_max_bytes,
            payload,
            idem_key,
            fingerprint,
            int(self.limits.idempotency_ttl_s),
            "" if record.deadline_at is None else repr(record.deadline_at),
            "" if run_by is None else run_by[0],
            "0" if run_by is None else repr(run_by[1]),
            *flat,
        )
        outcome = _text(reply[0])
        if outcome == "created":
            record.created_at = float(reply[1])
            if run_by is not None:
                record.state, record.worker, record.attempts = RUNNING, run_by[0], 1
                record.started_at = record.created_at
            else:
                self.hub.notify(work_topic(record.model))  # this process's workers, at once
            return record, True
        if outcome == "replay":
            earlier = await self.get(_text(reply[1]))
            if earlier is None:
                raise IdempotentJobExpired()
            return earlier, False
        if outcome == "reused":
            raise IdempotencyKeyReused()
        if outcome == "expired":
            raise IdempotentJobExpired()
        limit = _text(reply[1])
        messages = {
            "key_max_jobs": "this key has reached its limit of unfinished jobs (max_jobs of the key)",
            "max_jobs": f"too many jobs: {self.limits.max_jobs} are queued or running (max_jobs)",
            "job_inputs_max_bytes": f"the queued inputs would pass "
            f"{self.limits.inputs_max_bytes} bytes (job_inputs_max_bytes)",
        }
        raise Refused(messages[limit], limit=limit)

    async def get(self, job_id: str) -> JobRecord | None:
        return self._alive(await self._call(self._redis.hgetall(self._key("job", job_id))))

    async def result(self, job_id: str) -> bytes | None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hget(self._key("job", job_id), "finished_at")
            pipe.get(self._key("out", job_id))
            finished_at, data = await self._call(pipe.execute(), payload_bytes=RESULT_BYTES)
        if not finished_at or float(finished_at) + self.limits.ttl_s <= time.time():
            return None
        return bytes(data) if data is not None else None

    async def cancel(self, job_id: str) -> JobRecord | None:
        raw = await self._script("cancel", job_id, json.dumps(cancelled_error()))
        record = None if not raw else self._alive(_pairs(raw))
        if record is not None:
            self.hub.notify(cancel_topic(job_id))
            if record.finished:
                self.hub.notify(done_topic(job_id))
        return record

    async def delete(self, job_id: str) -> bool:
        return bool(await self._script("delete", job_id))

    async def jobs_of(self, owner: str, limit: int) -> list[JobRecord]:
        ids = await self._call(self._redis.zrevrange(self._key("owner", owner), 0, 2 * limit))
        async with self._redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(self._key("job", _text(job_id)))
            rows = await self._call(pipe.execute())
        records = [self._alive(row) for row in rows]
        return [r for r in records if r is not None][:limit]

    async def take_token(self, owner: str, rate_per_s: float, burst: float) -> float:
        return float(await self._script("token", owner, repr(1.0 / rate_per_s), repr(burst)))

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
        reply = await self._script(
            "claim", worker, model, repr(lease_s), len(skip_owners), *skip_owners, *priorities
        )
        if not reply:
            return None
        payload, raw, more = reply
        return Claim(JobRecord.from_fields(_pairs(raw)), bytes(payload), more > 0)

    async def renew(
        self, worker: str, job_ids: list[str], lease_s: float
    ) -> tuple[set[str], set[str]]:
        if not job_ids:
            return set(), set()
        cancelled, lost = await self._script("renew", worker, repr(lease_s), *job_ids)
        return {_text(i) for i in cancelled}, {_text(i) for i in lost}

    async def set_progress(self, job_id: str, worker: str, step: int, total: int) -> None:
        await self._script(
            "progress", job_id, worker, step, total, repr(self.webhook_progress_interval_s)
        )

    async def put_checkpoint(self, job_id: str, worker: str, name: str, data: bytes) -> bool:
        """One script: the lease check and the ``HSET``; the hash's expiry (``ttl_s``,
        renewed by every put) only guards against an orphan, as the job's own end
        deletes it."""
        ttl_ms = max(1, int(self.limits.ttl_s * 1000))
        return bool(await self._script("put_checkpoint", job_id, worker, name, data, ttl_ms))

    async def checkpoint(self, job_id: str, name: str) -> bytes | None:
        data = await self._call(
            self._redis.hget(self._key("ckpt", job_id), name), payload_bytes=RESULT_BYTES
        )
        return bytes(data) if data is not None else None

    async def finish(
        self,
        job_id: str,
        state: str,
        *,
        result: bytes | None = None,
        error: dict[str, str] | None = None,
        progress: tuple[int, int] | None = None,
    ) -> bool:
        step, total = ("", "") if progress is None else progress
        finished = await self._script(
            "finish",
            job_id,
            state,
            "" if error is None else json.dumps(error),
            b"" if result is None else result,
            "1" if result is not None else "0",
            self.limits.results_max_bytes,
            step,
            total,
        )
        if finished:
            self.hub.finished(job_id, result)
        return bool(finished)

    async def release(self, worker: str, job_ids: list[str]) -> None:
        if job_ids:
            await self._script("release", worker, *job_ids)

    async def reap(self) -> int:
        requeued = await self._script(
            "reap",
            self.limits.max_attempts,
            repr(self.limits.ttl_s),
            json.dumps(lost_error("{attempts}")),
            json.dumps(late_error()),
        )
        await self._drop_dead_workers()
        return int(requeued)

    async def _drop_dead_workers(self) -> None:
        workers = await self._call(self._redis.hgetall(self._key("workers")))
        now = await self.now()
        dead = [w for w, raw in workers.items() if json.loads(raw)["expires_at"] <= now]
        if dead:
            await self._call(self._redis.hdel(self._key("workers"), *dead))

    async def publish_models(self, worker: str, models: dict[str, Any], ttl_s: float) -> None:
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

    async def withdraw(self, worker: str) -> None:
        await self._call(self._redis.hdel(self._key("workers"), worker))

    async def models(self) -> dict[str, tuple[dict[str, Any], bool]]:
        workers = await self._call(self._redis.hgetall(self._key("workers")))
        details = await self._call(self._redis.hgetall(self._key("models")))
        now = await self.now()
        served: set[str] = set()
        for raw in workers.values():
            entry = json.loads(raw)
            if entry["expires_at"] > now:
                served.update(entry["models"])
        return {
            _text(name): (json.loads(raw), _text(name) in served) for name, raw in details.items()
        }

    async def queue_depths(self) -> dict[str, int]:
        raw = await self._call(self._redis.hgetall(self._key("queued")))
        return {_text(name): max(0, int(count)) for name, count in raw.items()}

    # ------------------------------------------------------------------ webhooks
    async def due_webhooks(self, lease_s: float, limit: int) -> list[Delivery]:
        lease, ids = await self._script("due_webhooks", repr(lease_s), limit)
        records = [await self.get(_text(job_id)) for job_id in ids]
        return [Delivery(r, float(lease)) for r in records if r is not None]

    async def update_webhook(
        self, job_id: str, webhook: dict[str, Any], due_at: float | None, *, lease: float
    ) -> None:
        due = "" if due_at is None else repr(due_at)
        await self._script("update_webhook", job_id, json.dumps(webhook), due, repr(lease))

    async def now(self) -> float:
        return float(await self._script("now"))

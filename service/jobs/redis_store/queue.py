"""The job queue on Redis: jobs, their blobs and the fair queue, one Lua script a change.

Each state change is one script (atomic on the server, timed by the server's clock);
the shared functions below (a job's requeue, finish and forgetting) come before the
scripts that use them. The fair order: per model and priority, a zset of the owners
with queued jobs, scored by the turn (``INCR turn``) each was last served at (a new
owner at 0, ahead of all), each owner's jobs a list, oldest first.

Over Redis's ``maxmemory`` only the scripts that bring a client's bytes (a create, a
checkpoint, a finish with its result) are refused (``StoreFull``); the others keep the
jobs already held moving and free memory (their first line is
:data:`~service.jobs.redis_store.connection.ALLOW_OOM`).

With a blob store, an input or result of ``FILE_MIN_BYTES`` or more is written there
first and Redis holds a reference in its place (``service.jobs.redis_store.values``;
sizes are counted as the blob's, not the reference's). A blob whose reference a script
dropped is deleted at once by a finish (the input's) or a delete (the result's); one
dropped by expiry or eviction inside a script, by the next sweep of the reaper
(``BLOB_SWEEP_S``), once older than ``WRITE_GRACE_S``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from service.errors import StoreFull, StoreUnavailable
from service.jobs import shared
from service.jobs.blobs import (
    FILE_MIN_BYTES,
    WRITE_GRACE_S,
    BlobRef,
    HeldBytes,
    PackedSource,
    StoredBlob,
    forget,
    forget_blob,
    forgotten_if_refused,
)
from service.jobs.records import JobRecord
from service.jobs.redis_store.connection import ALLOW_OOM, RedisBackend, pairs, text
from service.jobs.redis_store.values import REF_MAX_BYTES, reference, referenced
from service.jobs.roles import JobQueue

#: How a job leaves: requeued, finished, forgotten (for the scripts that need them).
logger = logging.getLogger("atelier.jobs.redis")

#: The least time between two sweeps of the blobs no value refers to (``reap``).
BLOB_SWEEP_S = 60.0

_JOBS = r"""
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
local function finish(id, state, err, result, has_result, budget, step, total, result_size)
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
  if has_result == '1' then size = tonumber(result_size) or string.len(result) end
  redis.call('HSET', key, 'state', state, 'finished_at', tostring(now), 'error', err,
             'result_bytes', size)
  if state == 'succeeded' then
    redis.call('HSET', key, 'step', redis.call('HGET', key, 'total') or '0')
  end
  local inkey = p .. 'in:' .. id
  redis.call('DECRBY', p .. 'inbytes', tonumber(redis.call('HGET', key, 'input_bytes') or '0') or 0)
  redis.call('DEL', inkey, p .. 'ckpt:' .. id)  -- a final job needs no checkpoints
  if f[2] ~= 'interactive' then  -- an async job: background or bulk
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

#: Mirrors ``shared.admit`` (a refusal returns the limit and the count it found).
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
local size = tonumber(ARGV[16])
if prio ~= 'interactive' then  -- an async job: background or bulk
  local mine = tonumber(redis.call('HGET', p .. 'unfinished', owner) or '0') or 0
  if mine >= owner_max then return {'refused', 'key_max_jobs', tostring(mine)} end
  local all = tonumber(redis.call('HGET', p .. 'unfinished', '') or '0') or 0
  if all >= max_jobs then return {'refused', 'max_jobs', tostring(all)} end
end
local held = tonumber(redis.call('GET', p .. 'inbytes') or '0') or 0
if held + size > in_max then return {'refused', 'job_inputs_max_bytes', tostring(held)} end
local key = p .. 'job:' .. id
local fields = {}
for i = 17, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', key, unpack(fields))
redis.call('HSET', key, 'created_at', tostring(now), 'input_bytes', size)
redis.call('SET', p .. 'in:' .. id, payload)
redis.call('INCRBY', p .. 'inbytes', size)
if prio ~= 'interactive' then  -- an async job: background or bulk
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

_CLAIM = (
    ALLOW_OOM
    + r"""
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
                                p .. 'owners:' .. model .. ':background',
                                p .. 'owners:' .. model .. ':bulk')
        return {redis.call('GET', p .. 'in:' .. id), redis.call('HGETALL', key), more}
      end
    end
  end
end
return false
"""
)

_RENEW = (
    ALLOW_OOM
    + r"""
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
)

_PROGRESS = (
    ALLOW_OOM
    + r"""
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
)

_PUT_CHECKPOINT = r"""
local id, worker, name, data, ttl_ms = ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local f = redis.call('HMGET', p .. 'job:' .. id, 'worker', 'state')
if f[1] ~= worker or f[2] ~= 'running' then return 0 end
local key = p .. 'ckpt:' .. id
redis.call('HSET', key, name, data)
redis.call('PEXPIRE', key, ttl_ms)
return 1
"""

_FINISH = (
    _JOBS
    + r"""
return finish(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9],
              ARGV[10])
"""
)

#: A finish without a result only frees memory (the job's input goes).
_FINISH_FREEING = ALLOW_OOM + _FINISH

_CANCEL = (
    ALLOW_OOM
    + _JOBS
    + r"""
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
)

_DELETE = (
    ALLOW_OOM
    + _JOBS
    + r"""
local state = redis.call('HGET', p .. 'job:' .. ARGV[2], 'state')
if not state or not final(state) then return 0 end
forget(ARGV[2])
return 1
"""
)

_RELEASE = (
    ALLOW_OOM
    + _JOBS
    + r"""
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
)

_REAP = (
    ALLOW_OOM
    + _JOBS
    + r"""
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
)


class RedisJobQueue(RedisBackend, JobQueue):
    """:class:`~service.jobs.roles.JobQueue` on Redis (keys: the package's docstring)."""

    # ------------------------------------------------------------------ API side
    async def _occupancy(self, owner: str) -> shared.Occupancy:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hmget(self._key("unfinished"), [owner, ""])
            pipe.get(self._key("inbytes"))
            (mine, everyone), held = await self._call(pipe.execute())
        return shared.Occupancy(int(mine or 0), int(everyone or 0), int(held or 0))

    async def _create(self, job: shared.Submission) -> tuple[JobRecord, bool]:
        record, run_by = job.record, job.run_by
        idem_key, fingerprint = "", ""
        if job.idempotency is not None:
            key, fingerprint = job.idempotency
            digest = hashlib.sha256(key.encode()).hexdigest()
            idem_key = self._key("idem", record.owner, digest)
        fields = record.to_fields()
        fields["wh_completed"] = "1" if job.wants("completed") else "0"
        fields["wh_progress_next"] = "0" if job.wants("progress") else "-1"
        flat = [item for pair in fields.items() for item in pair]
        stored, blob = await self._put_value(record.id, "in", (job.payload,))
        async with forgotten_if_refused(self.blobs, blob):
            reply = await self._create_script(job, idem_key, fingerprint, stored, flat)
        outcome = text(reply[0])
        if outcome != "created":  # a replay's job has its own input; a refusal none
            await forget_blob(self.blobs, blob)
        if outcome == "created":
            record.created_at = float(reply[1])
            if run_by is not None:
                shared.lease_to(record, run_by[0], record.created_at)
            return record, True
        if outcome == "replay":
            earlier = await self._read(text(reply[1]))
            if earlier is None:
                raise shared.IdempotentJobExpired()
            return earlier, False
        if outcome == "reused":
            raise shared.IdempotencyKeyReused()
        if outcome == "expired":
            raise shared.IdempotentJobExpired()
        raise shared.refusal(self.limits, text(reply[1]), int(reply[2]))

    async def _create_script(
        self,
        job: shared.Submission,
        idem_key: str,
        fingerprint: str,
        stored: bytes,
        flat: list[str],
    ) -> Any:
        record, run_by = job.record, job.run_by
        return await self._script(
            _CREATE,
            record.id,
            record.owner,
            record.model,
            record.priority,
            job.owner_max_jobs,
            self.limits.max_jobs,
            self.limits.inputs_max_bytes,
            stored,
            idem_key,
            fingerprint,
            int(self.limits.idempotency_ttl_s),
            "" if record.deadline_at is None else repr(record.deadline_at),
            "" if run_by is None else run_by[0],
            "0" if run_by is None else repr(run_by[1]),
            len(job.payload),
            *flat,
        )

    async def get(self, job_id: str) -> JobRecord | None:
        return await self._read(job_id)

    async def result(self, job_id: str) -> bytes | None:
        held = await self._held_result(job_id)
        return None if held is None else await self._value(held)

    async def result_source(self, job_id: str) -> PackedSource | None:
        held = await self._held_result(job_id)
        if held is None:
            return None
        ref = referenced(held)
        if ref is not None and self.blobs is not None:
            return StoredBlob(self.blobs, ref)
        return HeldBytes(held)

    async def _held_result(self, job_id: str) -> bytes | None:
        """The job's ``out`` value as Redis holds it (the result, or a reference to its
        blob); ``None`` when the job is unknown, expired, or has no result."""
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hget(self._key("job", job_id), "finished_at")
            pipe.get(self._key("out", job_id))
            finished_at, data = await self._call(pipe.execute(), payload_bytes=shared.RESULT_BYTES)
        if not finished_at or self.limits.expired(float(finished_at), time.time()):
            return None
        return None if data is None else bytes(data)

    async def _cancel(self, job_id: str) -> JobRecord | None:
        raw = await self._script(_CANCEL, job_id, json.dumps(shared.cancelled_error()))
        return None if not raw else self._alive(pairs(raw))

    async def delete(self, job_id: str) -> bool:
        named = await self._blobs_of(job_id, "out")
        deleted = bool(await self._script(_DELETE, job_id))
        if deleted:
            await self._drop_blobs(named)
        return deleted

    async def jobs_of(self, owner: str, limit: int) -> list[JobRecord]:
        ids = await self._call(self._redis.zrevrange(self._key("owner", owner), 0, 2 * limit))
        async with self._redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(self._key("job", text(job_id)))
            rows = await self._call(pipe.execute())
        records = [self._alive(row) for row in rows]
        return [r for r in records if r is not None][:limit]

    # --------------------------------------------------------------- worker side
    async def _claim(
        self, worker: str, model: str, order: tuple[str, ...], lease_s: float, skip: frozenset[str]
    ) -> shared.Claim | None:
        reply = await self._script(_CLAIM, worker, model, repr(lease_s), len(skip), *skip, *order)
        if not reply:
            return None
        payload, raw, more = reply
        record = JobRecord.from_fields(pairs(raw))
        value = await self._value(bytes(payload))
        if value is None:  # gone or damaged: the work cannot be rebuilt from it
            logger.error("a job's input blob is missing", extra={"job_id": record.id})
        return shared.Claim(record, value or b"", more > 0)

    async def _renew(
        self, worker: str, job_ids: list[str], lease_s: float
    ) -> tuple[set[str], set[str]]:
        cancelled, lost = await self._script(_RENEW, worker, repr(lease_s), *job_ids)
        return {text(i) for i in cancelled}, {text(i) for i in lost}

    async def _set_progress(self, job_id: str, worker: str, step: int, total: int) -> None:
        every = repr(self.webhook_progress_interval_s)
        await self._script(_PROGRESS, job_id, worker, step, total, every)

    async def put_checkpoint(self, job_id: str, worker: str, name: str, data: bytes) -> bool:
        """One script: the lease check and the ``HSET``; the hash's expiry (``ttl_s``,
        renewed by every put) only guards against an orphan, as the job's own end
        deletes it."""
        ttl_ms = max(1, int(self.limits.ttl_s * 1000))
        return bool(await self._script(_PUT_CHECKPOINT, job_id, worker, name, data, ttl_ms))

    async def checkpoint(self, job_id: str, name: str) -> bytes | None:
        data = await self._call(
            self._redis.hget(self._key("ckpt", job_id), name), payload_bytes=shared.RESULT_BYTES
        )
        return bytes(data) if data is not None else None

    async def _finish(self, job_id: str, outcome: shared.Outcome) -> bool:
        step, total = ("", "") if outcome.progress is None else outcome.progress
        result = outcome.result
        inputs = await self._blobs_of(job_id, "in")
        stored, blob = (
            (b"", None) if result is None else await self._put_value(job_id, "out", result.pieces)
        )
        async with forgotten_if_refused(self.blobs, blob):
            if result is not None:
                await self._check_room(len(stored))
            finished = await self._script(
                _FINISH if result is not None else _FINISH_FREEING,
                job_id,
                outcome.state,
                "" if outcome.error is None else json.dumps(outcome.error),
                stored,
                "1" if result is not None else "0",
                self.limits.results_max_bytes,
                step,
                total,
                0 if result is None else result.size,
            )
        if not finished:  # finished before (a rerun's outcome came first)
            await forget_blob(self.blobs, blob)
        else:  # the script dropped the input's reference
            await self._drop_blobs(inputs)
        return bool(finished)

    # ----------------------------------------------------------- big values
    async def _put_value(
        self, job_id: str, kind: str, pieces: Sequence[bytes]
    ) -> tuple[bytes, BlobRef | None]:
        """What Redis is to hold for the concatenation of ``pieces``: itself, or (big, with
        a blob store) a reference to the blob they were just written to, piece by piece
        (off the event loop, outside the breaker: its time is the blob store's)."""
        if self.blobs is None or sum(len(piece) for piece in pieces) < FILE_MIN_BYTES:
            return b"".join(pieces), None
        ref = await asyncio.to_thread(self.blobs.write, job_id, kind, pieces)
        return reference(ref), ref

    async def _value(self, held: bytes) -> bytes | None:
        """A value as Redis held it, or the blob it refers to (``None``: gone or damaged)."""
        ref = referenced(held)
        if ref is None:
            return held
        if self.blobs is None:
            logger.error("a job's value is in a blob store this process was not given")
            return None
        return await asyncio.to_thread(self.blobs.read, ref)

    async def _drop_blobs(self, names: list[str]) -> None:
        if self.blobs is not None:
            await forget(self.blobs, names)

    async def _blobs_of(self, job_id: str, kind: str) -> list[str]:
        """The blob the job's ``kind`` value refers to (none: small, or no blob store):
        read before a script drops the reference, deleted after it did."""
        if self.blobs is None:
            return []
        head = await self._call(self._redis.getrange(self._key(kind, job_id), 0, REF_MAX_BYTES))
        ref = referenced(bytes(head))
        return [] if ref is None else [ref.name]

    async def _sweep_blobs(self) -> int:
        """Delete the blobs no ``in:`` or ``out:`` value refers to any more (their jobs
        expired, were deleted or evicted: the scripts drop the reference), once older
        than ``WRITE_GRACE_S`` (a younger one may be a write whose script is still to
        run); at most every ``BLOB_SWEEP_S``. Returns how many went."""
        if self.blobs is None or time.monotonic() < self._blobs_swept_at + BLOB_SWEEP_S:
            return 0
        self._blobs_swept_at = time.monotonic()
        kept: set[str] = set()
        for kind in ("in", "out"):
            keys = [key async for key in self._redis.scan_iter(self._key(kind, "*"), count=500)]
            async with self._redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.getrange(key, 0, REF_MAX_BYTES)
                heads = await self._call(pipe.execute())
            kept.update(ref.name for head in heads if (ref := referenced(bytes(head))))
        try:
            return await asyncio.to_thread(self.blobs.sweep, kept, older_than_s=WRITE_GRACE_S)
        except StoreUnavailable:  # the next sweep tries again
            logger.warning("could not sweep the job blobs no value refers to")
            return 0

    async def _check_room(self, size: int) -> None:
        """Refuse a result that would take Redis past its ``maxmemory`` (Redis checks the
        limit only before a command, so one big write would pass it and be kept).

        Raises:
            StoreFull: ``size`` bytes more do not fit.
        """
        memory = await self._call(self._redis.info("memory"))
        limit, used = int(memory.get("maxmemory", 0)), int(memory.get("used_memory", 0))
        if limit and used + size > limit:
            raise StoreFull(
                f"the job store (Redis) is full: no room for {size} bytes more (its maxmemory); "
                "nothing new can be stored until finished jobs expire or an operator gives "
                "it room"
            )

    async def _release(self, worker: str, job_ids: list[str]) -> None:
        await self._script(_RELEASE, worker, *job_ids)

    async def reap(self) -> int:
        requeued = await self._script(
            _REAP,
            self.limits.max_attempts,
            repr(self.limits.ttl_s),
            json.dumps(shared.lost_error("{attempts}")),
            json.dumps(shared.late_error()),
        )
        await self._sweep_blobs()
        return int(requeued)

    async def queue_depths(self) -> dict[str, int]:
        raw = await self._call(self._redis.hgetall(self._key("queued")))
        return {text(name): max(0, int(count)) for name, count in raw.items()}

"""The Redis connection every role of :class:`~service.jobs.redis_store.RedisJobStore`
stands on: the client, the breaker around each command, the scripts, and the listener
that forwards the ``changes`` channel to the hub."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ReadOnlyError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.errors import StoreFull, StoreUnavailable
from service.jobs.blobs import BlobStore
from service.jobs.changes import ChangeHub
from service.jobs.records import JobRecord
from service.jobs.roles import Backend, BackendOptions
from service.jobs.shared import StoreLimits

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger("atelier.jobs.redis")

#: What every script starts with: the key prefix, the server's clock, and how a change
#: is announced (each script is atomic on the server and timed by its clock, so
#: replicas need not agree on the time).
PRELUDE = r"""
local p = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local function changed(topic) redis.call('PUBLISH', p .. 'changes', topic) end
"""

#: The first line of a script that runs while Redis is over its ``maxmemory``: one that
#: frees memory (a job finished without a result drops its input, the reaper forgets
#: expired jobs, a delete), so that a full store can still fail a job and empty itself.
ALLOW_OOM = "#!lua flags=allow-oom\n"

_NOW = r"""
return tostring(now)
"""


def pairs(raw: list[Any]) -> dict[bytes, bytes]:
    """``HGETALL``'s flat list from a script as a dict."""
    return dict(zip(raw[::2], raw[1::2], strict=True))


def text(value: bytes | str) -> str:
    """A reply of the client (bytes: it does not decode) as text."""
    return value.decode() if isinstance(value, bytes) else value


class RedisBackend(Backend):
    """The connection to the Redis (or Valkey) server at ``url``.

    Args:
        url: ``redis://host:port/db`` (``rediss://`` for TLS).
        limits: the store's bounds.
        hub: where change notifications go.
        prefix: the key prefix (several deployments can share one server).
        timeout_s: a command's socket timeout (then ``StoreUnavailable``).
        blobs: where values of ``FILE_MIN_BYTES`` or more go (Redis keeps a reference;
            several hosts need one they all reach: S3, or a shared volume); ``None``:
            every value stays in Redis.
        options: :class:`~service.jobs.roles.BackendOptions`.
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
        timeout_s: float = 5.0,
        blobs: BlobStore | None = None,
        **options: Unpack[BackendOptions],
    ) -> None:
        super().__init__(limits, hub, **options)
        self.url = url
        self.blobs = blobs
        #: when the blobs were last swept (``time.monotonic``)
        self._blobs_swept_at = float("-inf")
        self.prefix = prefix
        self._redis = aioredis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=min(timeout_s, 2.0),
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
            retry_on_error=[RedisConnectionError, RedisTimeoutError],
            health_check_interval=10,
        )
        self._scripts: dict[str, AsyncScript] = {}
        self._listening = asyncio.Event()

    # ----------------------------------------------------------------- lifecycle
    async def _open(self) -> None:
        """Nothing: the client connects on its first command."""

    async def _shut(self) -> None:
        await self._redis.aclose()

    async def now(self) -> float:
        return float(await self._script(_NOW))

    async def listening(self, timeout: float = 10.0) -> bool:
        """Whether the change listener is subscribed (tests wait on it)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._listening.wait()
        return self._listening.is_set()

    async def _hear_others(self) -> None:
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
                        self.hub.notify(text(message["data"]))
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

    # ------------------------------------------------------------------- commands
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
            logger.warning("Redis is unavailable", extra={"error": str(exc)})
            raise StoreUnavailable("the job store (Redis) cannot be reached") from exc
        except OutOfMemoryError as exc:  # redis-py strips the "OOM" of the reply
            logger.warning("Redis refuses a write", extra={"error": str(exc)})
            raise StoreFull(
                "the job store (Redis) is full (its maxmemory): nothing new can be stored "
                "until finished jobs expire or an operator gives it room"
            ) from exc
        except ReadOnlyError as exc:
            raise StoreFull("the job store (Redis) is a read-only replica") from exc
        except ResponseError as exc:
            if str(exc).startswith("MISCONF"):
                logger.warning("Redis refuses a write", extra={"error": str(exc)})
                raise StoreFull(
                    "the job store (Redis) cannot save to its disk (full?) and refuses "
                    "writes until it can"
                ) from exc
            raise

    async def _probe(self) -> None:
        """One round trip that must be the probe's own: ``ECHO`` of a fresh token. A
        paused Redis once closed the breaker through a ``PING`` that returned (most
        likely a reply the connection held from before; the server was stopped):
        another reply proves nothing, so the pool's connections are dropped and the
        store still counts as stalled."""
        token = secrets.token_hex(8)
        answer = await self._redis.echo(token)
        if answer not in (token, token.encode()):
            await self._redis.connection_pool.disconnect()
            raise StoreUnavailable("the job store (Redis) answered a probe with another reply")

    async def _script(self, source: str, *args: Any) -> Any:
        """Run the script ``source`` (after :data:`PRELUDE`) with ``args`` after the
        prefix; registered on first use (the client loads it on the server when the
        server does not know it)."""
        script = self._scripts.get(source)
        if script is None:
            flags, body = "", source
            if source.startswith(ALLOW_OOM):  # the flags line comes first
                flags, body = ALLOW_OOM, source.removeprefix(ALLOW_OOM)
            script = self._scripts[source] = self._redis.register_script(flags + PRELUDE + body)
        size = sum(len(arg) for arg in args if isinstance(arg, bytes | bytearray))
        return await self._call(script(args=[self.prefix, *args]), payload_bytes=size)

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    # -------------------------------------------------------------------- records
    def _alive(self, raw: dict[bytes, bytes]) -> JobRecord | None:
        """A job hash as its record (None: missing, or finished past ``ttl_s``)."""
        if not raw:
            return None
        record = JobRecord.from_fields(raw)
        return None if self.limits.expired(record.finished_at, time.time()) else record

    async def _read(self, job_id: str) -> JobRecord | None:
        return self._alive(await self._call(self._redis.hgetall(self._key("job", job_id))))

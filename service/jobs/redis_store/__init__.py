"""The shared job store: Redis (>= 6.2) or Valkey, for several replicas and workers.

Every replica reads and writes the same jobs, so any replica answers ``GET``,
``DELETE`` and the event stream of any job, and workers on other hosts pull from the
same queue. Each state change is one Lua script (atomic on the server, timed by the
server's clock, so replicas need not agree on the time); changes are announced on one
pub/sub channel that every process listens to and forwards to its ``ChangeHub``.

One module a role, on one ``connection``: ``queue`` (the jobs), ``tokens`` (the rate
limits), ``directory`` (the workers' models), ``outbox`` (the webhook deliveries).

Keys (``prefix`` is ``atelier:`` by default)::

    job:{id}                     hash: the JobRecord's fields (+ webhook flags)
    in:{id}, out:{id}            the input and the result blobs (or, when big, a
                                 reference to them in the blob store)
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

from service.jobs.redis_store.connection import RedisBackend
from service.jobs.redis_store.directory import RedisModelDirectory
from service.jobs.redis_store.outbox import RedisWebhookOutbox
from service.jobs.redis_store.queue import RedisJobQueue
from service.jobs.redis_store.tokens import RedisRateLimits
from service.jobs.store import JobStore

__all__ = ["RedisBackend", "RedisJobStore"]


class RedisJobStore(
    RedisJobQueue, RedisRateLimits, RedisModelDirectory, RedisWebhookOutbox, JobStore
):
    """Jobs in the Redis (or Valkey) server at ``url``: every role on one connection
    (the arguments: :class:`~service.jobs.redis_store.connection.RedisBackend`)."""

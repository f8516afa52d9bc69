"""Asynchronous jobs: a durable store and the queue that workers pull from.

- ``records``: what a job is (its record, its result, the byte framing).
- ``store``: the store's interface and guarantees; ``sqlite_store`` and ``redis_store``
  implement it (``breaker``: how a store stays answerable while its backend is away).
- ``webhooks``: signed deliveries of a job's events.
- ``feeds``: one reader per job feeding its event streams.

The store holds bytes and records and knows nothing of the models or their pools:
what a job's bytes mean, and how a job runs, is ``service.execution``'s.
"""

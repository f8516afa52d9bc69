"""Asynchronous jobs: a durable store and the queue that workers pull from.

- ``records``: what a job is (its record, its result, the byte framing).
- ``store``: ``JobStore``, the store's four roles together (``roles``: the job queue,
  the rate limits, the model directory and the webhook outbox, each with its
  guarantees); ``sqlite_store/`` and ``redis_store/`` implement each role in a module
  of its own, on one connection; ``shared``: what both back ends share (the admission
  rule, expiry, leases, the values they take and hand out, the errors); ``changes``:
  how changes wake this process's waiters; ``breaker``: how a store stays answerable
  while its backend is away.
- ``webhooks``: signed deliveries of a job's events.
- ``feeds``: one reader per job feeding its event streams.

The store holds bytes and records and knows nothing of the models or their pools:
what a job's bytes mean, and how a job runs, is ``service.execution``'s.
"""

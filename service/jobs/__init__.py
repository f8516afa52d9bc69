"""Asynchronous jobs: a durable store, a queue that workers pull from, and the runner.

- ``records``: what a job is (its record, its result, the byte framing).
- ``store``: the store's interface and guarantees; ``sqlite_store`` and ``redis_store``
  implement it.
- ``work``: validated requests that run here or travel through the queue.
- ``runner``: the worker side (claim, run, renew, finish, drain).
- ``webhooks``: signed deliveries of a job's events.
"""

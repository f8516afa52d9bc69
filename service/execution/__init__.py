"""How work runs: the one owner of running a validated request now, as a job, or waited for.

- ``executor``: :class:`~service.execution.executor.Executor`, what a route hands its work
  to: it runs it at once on this process's worker pool, stores it as a job (202), or
  stores it and waits for it, as the request asked; the request's deadline, its
  preparation budget and its client's disconnect end there too.
- ``work``: the :class:`~service.execution.work.Work` every kind of work is, and its
  progress and checkpoints; ``generate``, ``stylize`` and ``video``: the kinds;
  ``kinds``: the kinds by the name a job's payload records.
- ``runner``: the worker side of the job queue (claim, run, renew, finish, drain).

This package joins the two layers below it, which know nothing of each other: the job
store (``service.jobs``: records, the durable queue, webhooks) and the worker pools
(``service.workers``: the models and their batchers). Work lives here, not in either,
because it is both: it travels through the store as bytes and runs on a pool.
"""

"""The two priorities work runs at: interactive and background.

* ``INTERACTIVE``: a client waits for the answer on its open connection (a synchronous
  request, whether it runs here at once or through the queue);
* ``BACKGROUND``: an async job (``Prefer: respond-async``), answered later.

Interactive work goes first: the job store claims its jobs first and counts only
background jobs against a key's ``max_jobs`` (``service.jobs``); every worker pool keeps
one batcher per priority, and a background batch yields the device at its step
boundaries while interactive work runs (``service.workers``, ``service.batching``).

Which priority a piece of work runs at is decided in one place, the executor
(``service.execution``). The names live here, below the job store, the worker pools and
the executor, because all three speak of them and none of them may import another for
them: the store and the pools are independent layers that only the executor joins.
"""

from __future__ import annotations

INTERACTIVE, BACKGROUND = "interactive", "background"
#: Every priority, the most urgent first.
PRIORITIES = (INTERACTIVE, BACKGROUND)

"""RunContext: how a work's items are sent (priority, owner, what is left of the deadline)
and the one sink their progress reaches (the job's ``Progress``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from service.errors import DeadlineExceeded
from service.execution.work import Progress, RunContext


class _Pool:
    """Records what each item was sent with; answers at once."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def submit(self, job: Any, **how: Any) -> torch.Tensor:
        self.sent.append({"job": job, **how})
        return torch.zeros(1)


def test_an_item_is_sent_with_what_is_left_of_the_deadline_since_the_run_started():
    pool = _Pool()
    context = RunContext("background", 30.0, None, "key", started=100.0)
    clock = 110.0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("service.execution.work.time.monotonic", lambda: clock)
        asyncio.run(context.submit(pool, "item", None))
    (sent,) = pool.sent
    assert sent["timeout_s"] == pytest.approx(20.0)
    assert (sent["priority"], sent["owner"]) == ("background", "key")
    assert sent["on_progress"] is None and sent["on_preview"] is None


def test_an_item_after_the_deadline_is_never_sent():
    pool = _Pool()
    context = RunContext("background", 5.0, None, "key", started=100.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("service.execution.work.time.monotonic", lambda: 105.0)
        with pytest.raises(DeadlineExceeded, match="deadline passed"):
            asyncio.run(context.submit(pool, "item", 0))
    assert pool.sent == []


def test_steps_and_counted_items_reach_the_same_progress():
    """A part's steps (through its batch's step control) and the items a work counts
    itself (``report``) are one job progress."""
    progress = Progress(1)
    pool = _Pool()
    context = RunContext("interactive", None, progress, "key")
    asyncio.run(context.submit(pool, "part", 0))
    pool.sent[0]["on_progress"](3, 7)  # what the batch's step control reports
    assert progress.current() == (3, 7)
    context.report(5, 9)
    assert progress.current() == (5, 9)
    asyncio.run(context.submit(pool, "item", None))
    assert pool.sent[1]["on_progress"] is None  # an item sent in turn reports nothing itself
    RunContext("interactive", None, None, "key").report(1, 2)  # no job: nothing to tell

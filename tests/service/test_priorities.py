"""The priorities' names, ranks and the bulk threads (``service.priorities``)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest

from service.priorities import (
    BACKGROUND,
    BULK,
    BULK_NICE,
    INTERACTIVE,
    PRIORITIES,
    off_loop_as_bulk,
    rank,
)


def test_ranks_follow_urgency_and_an_unknown_priority_is_refused():
    assert [rank(priority) for priority in (INTERACTIVE, BACKGROUND, BULK)] == [0, 1, 2]
    assert PRIORITIES[rank(BULK)] == BULK
    with pytest.raises(ValueError, match="unknown priority 'urgent'"):
        rank("urgent")


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_bulk_cpu_work_runs_on_its_own_threads_at_a_lower_priority():
    async def scenario() -> tuple[str, int, int]:
        name, nice = await off_loop_as_bulk(lambda: (threading.current_thread().name, _nice()))
        return name, nice, _nice()

    name, bulk_nice, loop_nice = asyncio.run(scenario())
    assert name.startswith("bulk-cpu")
    assert bulk_nice == min(19, loop_nice + BULK_NICE)
    assert _nice() == loop_nice  # the caller's thread keeps its priority

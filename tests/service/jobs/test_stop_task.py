"""``stop_task`` ends a background task even when a cancellation is swallowed on the
way, and never takes its caller's own cancellation for the task's.

The stubborn tasks here give up by themselves after ``STUBBORN_S``: a test of a
``stop_task`` that does not cancel again then fails on its asserts instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from service.jobs.shared import stop_task

pytestmark = pytest.mark.timeout(30)

STUBBORN_S = 3.0


async def _swallowing(swallowed: list[int], ends_after: int) -> None:
    """Swallows each cancel until it has swallowed ``ends_after``; returns (not
    cancelled) after ``STUBBORN_S``."""
    loop = asyncio.get_running_loop()
    until = loop.time() + STUBBORN_S
    while loop.time() < until:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            swallowed.append(1)
            if len(swallowed) >= ends_after:
                raise


def test_a_cancel_landing_as_wait_for_completes_still_stops_the_task():
    """The Redis listener's hang: its loop awaits ``asyncio.wait_for`` (as redis-py's
    sends do), and the cancel lands in the loop turn the awaited call completes."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        pending: list[asyncio.Future[None]] = []

        async def listener() -> None:
            until = loop.time() + STUBBORN_S
            with contextlib.suppress(TimeoutError):  # gives up by itself
                while True:
                    pending.append(loop.create_future())
                    await asyncio.wait_for(pending[-1], timeout=until - loop.time())

        task = asyncio.create_task(listener())
        while not pending:
            await asyncio.sleep(0)
        pending[-1].set_result(None)  # completes in the same turn as the cancel
        await stop_task(task)
        assert task.cancelled()

    asyncio.run(main())


def test_a_task_that_swallows_cancels_is_cancelled_until_it_ends():
    swallowed: list[int] = []

    async def main() -> None:
        task = asyncio.create_task(_swallowing(swallowed, ends_after=3))
        await asyncio.sleep(0)
        await stop_task(task)
        assert task.cancelled() and len(swallowed) == 3

    asyncio.run(main())


def test_the_callers_own_cancellation_is_raised():
    async def main() -> None:
        task = asyncio.create_task(_swallowing([], ends_after=10**9))
        await asyncio.sleep(0)
        with pytest.raises(TimeoutError):  # the caller's cancel, not swallowed
            async with asyncio.timeout(0.3):
                await stop_task(task)
        assert not task.done()
        await stop_task(task)  # it gives up by itself

    asyncio.run(main())


def test_an_exception_the_task_ends_with_is_raised():
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise ValueError("cleanup failed") from None

    async def main() -> None:
        task = asyncio.create_task(fails_on_cancel())
        await asyncio.sleep(0)
        with pytest.raises(ValueError, match="cleanup failed"):
            await stop_task(task)

    asyncio.run(main())


def test_nothing_to_stop():
    asyncio.run(stop_task(None))

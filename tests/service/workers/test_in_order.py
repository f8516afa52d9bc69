"""``in_order``: submissions in a sliding window, results in the items' order."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from service.errors import DeadlineExceeded
from service.workers.pool import in_order


class Device:
    """Runs submissions, each for ``seconds(item)``, counting how many are in flight at
    once and which were cancelled (with the cancel's reason)."""

    def __init__(
        self,
        seconds=lambda item: 0.001 * (10 - item % 10),  # later ones finish first
        fail_at: int | None = None,
        error: Exception | None = None,
    ) -> None:
        self.in_flight = self.most = 0
        self.cancelled: list[tuple[int, object]] = []
        self.seconds, self.fail_at, self.error = seconds, fail_at, error

    async def submit(self, item: int) -> int:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(0 if item == self.fail_at else self.seconds(item))
            if item == self.fail_at:
                raise self.error or RuntimeError("failed")
            return item * item
        except asyncio.CancelledError as cancel:
            self.cancelled.append((item, cancel.args[0] if cancel.args else None))
            raise
        finally:
            self.in_flight -= 1


@pytest.mark.parametrize("window", [1, 2, 5])
def test_results_come_in_order_with_at_most_the_window_in_flight(window):
    device = Device()

    async def main() -> list[tuple[int, int]]:
        async with aclosing(in_order(device.submit, range(12), window)) as results:
            return [pair async for pair in results]

    assert asyncio.run(main()) == [(item, item * item) for item in range(12)]
    assert device.most == window and device.cancelled == []


def test_the_next_is_submitted_before_a_result_is_handed_over():
    """While the caller takes a result in, the window is full again (the next item has
    reached the device at the caller's first await)."""
    device = Device()
    seen = []

    async def main() -> None:
        async with aclosing(in_order(device.submit, range(6), 2)) as results:
            async for _item, _ in results:
                await asyncio.sleep(0)
                seen.append(device.in_flight)
                await asyncio.sleep(0.02)  # the caller's own work on the result

    asyncio.run(main())
    assert seen[:4] == [1, 1, 1, 1] and seen[-1] == 0


def test_a_failure_cancels_the_rest_and_a_deadline_cancels_them_as_a_deadline():
    for error, reason in ((RuntimeError("boom"), None), (DeadlineExceeded("late"), "deadline")):
        device = Device(lambda item: 0.05, fail_at=3, error=error)

        async def main(device: Device = device) -> list[int]:
            got = []
            async with aclosing(in_order(device.submit, range(10), 3)) as results:
                async for item, _ in results:
                    got.append(item)
            return got

        with pytest.raises(type(error)):
            asyncio.run(main())
        assert sorted(item for item, _ in device.cancelled) == [4, 5]
        assert {why for _, why in device.cancelled} <= {reason, None}
        assert any(why == reason for _, why in device.cancelled)


def test_leaving_early_cancels_what_is_in_flight():
    device = Device(lambda item: 0.05 * item)

    async def main() -> None:
        async with aclosing(in_order(device.submit, range(10), 3)) as results:
            async for item, _ in results:
                if item == 1:
                    break
        await asyncio.sleep(0)  # the cancelled submissions unwind

    asyncio.run(main())
    # 2 and 3 were running; 4, sent as 1 came back, was cancelled before it started
    assert sorted(item for item, _ in device.cancelled) == [2, 3]
    assert device.in_flight == 0 and device.most == 3


def test_a_window_below_one_is_refused():
    async def main() -> None:
        async with aclosing(in_order(Device().submit, range(3), 0)) as results:
            async for _ in results:
                pass

    with pytest.raises(ValueError, match="window must be >= 1"):
        asyncio.run(main())

"""The dynamic batcher, driven by events: no test sleeps to make something happen.

A flush "at once" is shown by a max wait of an hour (the test would hang otherwise,
pytest-timeout fails it); a forward blocked on a ``threading.Event`` holds a batch in
flight while the test arranges the queue behind it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from service.batching import Batcher, Closed, DeviceGate, Expired, QueueFull

HOUR = 3600.0
pytestmark = pytest.mark.timeout(20)


class RecordingForward:
    """Doubles each item; records batches; optionally blocks on a gate or fails."""

    def __init__(self, *, gate: threading.Event | None = None, fail=None):
        self.calls: list[list] = []
        self.gate = gate
        self.started = threading.Event()
        self.fail = fail

    def __call__(self, items, control=None):
        self.calls.append(list(items))
        self.started.set()
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail is not None:
            self.fail(items)
        return [2 * x for x in items]


async def _until(predicate, limit: int = 1000) -> None:
    """Yield to the event loop until ``predicate()`` holds (no wall-clock waiting)."""
    for _ in range(limit):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def _thread_until(predicate) -> None:
    """Poll ``predicate`` from a thread until it holds (a state another thread sets)."""

    def poll() -> bool:
        for _ in range(10_000):
            if predicate():
                return True
            time.sleep(0.001)
        return False

    assert await asyncio.get_running_loop().run_in_executor(None, poll)


async def _thread_event(event: threading.Event) -> None:
    assert await asyncio.get_running_loop().run_in_executor(None, event.wait, 10)


async def _inside_forward(
    batcher: Batcher, forward: RecordingForward, item, **kw
) -> asyncio.Future:
    """Submit ``item`` and wait until ``forward`` runs it: a gated forward then holds it
    in flight while the test arranges the queue behind it."""
    task = asyncio.ensure_future(batcher.submit(item, **kw))
    await _thread_event(forward.started)
    return task


async def _queue(batcher: Batcher, items, **kw) -> list[asyncio.Future]:
    """Submit ``items`` and wait until every one of them waits in ``batcher``'s queue
    (its depth grown by ``len(items)``): their tasks, in order."""
    depth = batcher.queued + len(items)
    tasks = [asyncio.ensure_future(batcher.submit(item, **kw)) for item in items]
    await _until(lambda: batcher.queued == depth)
    return tasks


def _make(forward, **kw) -> Batcher:
    options = {"max_batch_size": 4, "max_wait_s": HOUR, "queue_size": 16}
    options.update(kw)
    return Batcher(forward, **options)


@asynccontextmanager
async def _running(forward, **kw) -> AsyncIterator[Batcher]:
    """A started :func:`_make` batcher, closed (every accepted item finished) when the
    block ends without an error."""
    batcher = _make(forward, **kw)
    batcher.start()
    yield batcher
    await batcher.close()


def _submit_at_once(forward, items, *, keys=None, **kw) -> list:
    """Submit ``items`` together (``keys[i]`` as item i's key, where given) to a
    :func:`_running` batcher over ``forward``: each item's outcome, its result or its
    exception, in order, once the batcher is closed."""

    async def scenario():
        async with _running(forward, **kw) as batcher:
            submits = (
                batcher.submit(item, key=key)
                for item, key in zip(items, keys or [None] * len(items), strict=True)
            )
            return await asyncio.gather(*submits, return_exceptions=True)

    return asyncio.run(scenario())


def test_full_batch_flushes_at_once():
    forward = RecordingForward()
    results = _submit_at_once(forward, (1, 2, 3), max_batch_size=3)
    assert results == [2, 4, 6]
    assert forward.calls == [[1, 2, 3]]


def test_partial_batch_waits_for_companions():
    async def scenario():
        forward = RecordingForward()
        async with _running(forward, max_batch_size=3) as batcher:
            first = await _queue(batcher, (1, 2))
            for _ in range(50):  # let the batching task run as much as it wants
                await asyncio.sleep(0)
            calls_before = list(forward.calls)
            third = await batcher.submit(3)
        return calls_before, forward.calls, [await f for f in first] + [third]

    calls_before, calls, results = asyncio.run(scenario())
    assert calls_before == []
    assert calls == [[1, 2, 3]]
    assert results == [2, 4, 6]


def test_partial_batch_flushes_after_max_wait():
    forward = RecordingForward()
    [result] = _submit_at_once(forward, (5,), max_batch_size=8, max_wait_s=0.01)
    assert result == 10
    assert forward.calls == [[5]]


def test_close_flushes_what_is_queued():
    async def scenario():
        forward = RecordingForward()
        async with _running(forward, max_batch_size=8) as batcher:
            pending = await _queue(batcher, (1, 2))
        with pytest.raises(Closed):
            await batcher.submit(3)
        return forward, [await p for p in pending]

    forward, results = asyncio.run(scenario())
    assert forward.calls == [[1, 2]]
    assert results == [2, 4]


def test_incompatible_requests_do_not_share_a_forward():
    forward = RecordingForward()
    results = _submit_at_once(forward, (1, 2, 3, 4), keys=("a", "b", "a", "b"), max_batch_size=2)
    assert results == [2, 4, 6, 8]
    assert sorted(sorted(call) for call in forward.calls) == [[1, 3], [2, 4]]


def test_errors_fan_out_to_every_caller():
    def always(items, control=None):
        raise RuntimeError("model exploded")

    outcomes = _submit_at_once(RecordingForward(fail=always), (1, 2, 3), max_batch_size=3)
    assert len(outcomes) == 3
    assert all(isinstance(o, RuntimeError) and "exploded" in str(o) for o in outcomes)


def test_one_poisoned_request_fails_alone():
    def poison(items):
        if 13 in items:
            raise ValueError("13 is poison")

    forward = RecordingForward(fail=poison)
    outcomes = _submit_at_once(forward, (1, 13, 3), max_batch_size=3)
    assert outcomes[0] == 2 and outcomes[2] == 6
    assert isinstance(outcomes[1], ValueError)
    assert forward.calls == [[1, 13, 3], [1], [13], [3]]


def test_wrong_number_of_results_is_an_error_not_a_mixup():
    def short(items, control=None):
        return [0] * (len(items) - 1)

    outcomes = _submit_at_once(short, (1, 2), max_batch_size=2)
    assert all(isinstance(o, RuntimeError) and "results for" in str(o) for o in outcomes)


class FakeOutOfMemory(RuntimeError):
    pass


def test_out_of_memory_splits_the_batch():
    def oom_above_two(items):
        if len(items) > 2:
            raise FakeOutOfMemory("tried to allocate 2 GiB")

    released = []

    forward = RecordingForward(fail=oom_above_two)
    results = _submit_at_once(
        forward,
        (1, 2, 3, 4),
        max_batch_size=4,
        is_out_of_memory=lambda exc: isinstance(exc, FakeOutOfMemory),
        release_memory=lambda: released.append(True),
    )
    assert results == [2, 4, 6, 8]
    assert [len(c) for c in forward.calls] == [4, 2, 2]
    assert released == [True]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_request_past_its_deadline_is_dropped_before_the_forward():
    async def scenario():
        clock = FakeClock()
        gate = threading.Event()
        forward = RecordingForward(gate=gate)
        async with _running(forward, max_batch_size=1, max_wait_s=0.0, clock=clock) as batcher:
            blocker = await _inside_forward(batcher, forward, 1)  # item 1 is inside the forward
            [late] = await _queue(batcher, (2,), timeout_s=30.0)
            clock.now += 31.0  # item 2's deadline passes while it queues
            gate.set()
            with pytest.raises(Expired):
                await late
            after = await batcher.submit(3, timeout_s=30.0)
        return forward, await blocker, after

    forward, first, after = asyncio.run(scenario())
    assert (first, after) == (2, 6)
    assert forward.calls == [[1], [3]]  # 2 never reached the model


def test_caller_timeout_answers_deadline_exceeded_and_leaves_the_queue():
    async def scenario():
        gate = threading.Event()
        forward = RecordingForward(gate=gate)
        async with _running(forward, max_batch_size=1, max_wait_s=0.0) as batcher:
            blocker = await _inside_forward(batcher, forward, 1)
            with pytest.raises(Expired):
                await batcher.submit(2, timeout_s=0.01)
            queued_after_timeout = batcher.queued
            gate.set()
            await blocker
        return forward, queued_after_timeout

    forward, queued_after_timeout = asyncio.run(scenario())
    assert queued_after_timeout == 0
    assert forward.calls == [[1]]


def test_full_queue_answers_overloaded_with_retry_after():
    async def scenario():
        gate = threading.Event()
        forward = RecordingForward(gate=gate)
        async with _running(forward, max_batch_size=1, max_wait_s=0.0, queue_size=2) as batcher:
            in_flight = await _inside_forward(batcher, forward, 0)
            queued = await _queue(batcher, (1, 2))
            with pytest.raises(QueueFull) as info:
                await batcher.submit(3)
            gate.set()
            results = [await in_flight] + [await q for q in queued]
        return info.value, results

    error, results = asyncio.run(scenario())
    assert 0.0 <= error.retry_after_s < HOUR  # no forward timed yet: the wait alone
    assert results == [0, 2, 4]


def test_load_counts_queued_and_in_flight_items():
    async def scenario():
        gate = threading.Event()
        forward = RecordingForward(gate=gate)
        async with _running(forward, max_batch_size=2, max_wait_s=0.0) as batcher:
            tasks = [asyncio.ensure_future(batcher.submit(i)) for i in (1, 2)]
            await _thread_event(forward.started)
            tasks += await _queue(batcher, (3,))
            load = batcher.load
            gate.set()
            await asyncio.gather(*tasks)
        return load, batcher.load

    during, after = asyncio.run(scenario())
    assert (during, after) == (3, 0)


@pytest.mark.parametrize(
    "kwargs",
    [{"max_batch_size": 0}, {"max_wait_s": -1.0}, {"queue_size": 0}],
)
def test_bad_arguments_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        _make(lambda items, control: items, **kwargs)


def test_out_of_memory_frees_the_failed_forward_before_the_halves_run():
    """A real forward's activations live in its frames; the retry must not keep them."""
    holders: list[weakref.ref] = []
    alive_at_release: list[bool] = []
    release_threads: list[str] = []

    class Activations:
        pass

    def forward(items, control=None):
        activations = Activations()  # held by this frame, as a forward's tensors are
        holders.append(weakref.ref(activations))
        if len(items) > 2:
            raise FakeOutOfMemory("tried to allocate 2 GiB")
        return [2 * x for x in items]

    def release():
        release_threads.append(threading.current_thread().name)
        alive_at_release.append(holders[0]() is not None)

    results = _submit_at_once(
        forward,
        (1, 2, 3, 4),
        is_out_of_memory=lambda exc: isinstance(exc, FakeOutOfMemory),
        release_memory=release,
        name="oom-test",
    )
    assert results == [2, 4, 6, 8]
    assert alive_at_release == [False]  # the failed forward's frame was gone
    assert release_threads[0].startswith("oom-test")  # on the worker thread


def test_a_single_item_out_of_memory_reaches_its_caller_without_the_frames():
    holders: list[weakref.ref] = []

    class Activations:
        pass

    def forward(items, control=None):
        activations = Activations()
        holders.append(weakref.ref(activations))
        raise FakeOutOfMemory("tried to allocate 2 GiB")

    async def scenario():
        async with _running(forward, is_out_of_memory=lambda exc: True, max_wait_s=0.0) as batcher:
            with pytest.raises(FakeOutOfMemory) as info:
                await batcher.submit(1)
        return info.value

    error = asyncio.run(scenario())
    assert error.__traceback__ is None or holders[0]() is None
    assert holders[0]() is None


def test_batch_cost_budget_bounds_a_forward():
    async def scenario():
        forward = RecordingForward()
        batcher = _make(forward, max_batch_size=8, cost=lambda item: item, max_batch_cost=10)
        results = await asyncio.gather(
            *(asyncio.ensure_future(batcher.submit(i)) for i in (4, 4, 4, 20)),
            _start_later(batcher),
        )
        await batcher.close()
        return forward.calls, results

    calls, results = asyncio.run(scenario())
    assert results[:4] == [8, 8, 8, 40]
    assert all(sum(batch) <= 10 or len(batch) == 1 for batch in calls)
    assert sorted(x for batch in calls for x in batch) == [4, 4, 4, 20]


async def _start_later(batcher: Batcher) -> None:
    """Start the batcher once every submit above has queued (same loop iteration)."""
    await asyncio.sleep(0)
    batcher.start()


def test_an_owner_with_a_backlog_delays_another_owner_by_at_most_one_batch():
    async def scenario():
        gate = threading.Event()
        forward = RecordingForward(gate=gate)
        async with _running(forward, max_batch_size=2, max_wait_s=0.0) as batcher:
            first = await _inside_forward(
                batcher, forward, "a0", owner="a"
            )  # a0 runs; a's backlog queues behind it
            backlog = await _queue(batcher, [f"a{i}" for i in range(1, 7)], owner="a")
            [other] = await _queue(batcher, ("b0",), owner="b")
            gate.set()
            await asyncio.gather(first, other, *backlog)
        return forward.calls

    calls = asyncio.run(scenario())
    assert calls[0] == ["a0"]
    assert "b0" in calls[1]  # the next batch, not after a's whole backlog


def test_a_background_batch_yields_to_foreground_work_between_its_steps():
    gate = DeviceGate()
    order: list[str] = []
    background_paused = threading.Event()
    resume_steps = threading.Event()

    def background_forward(items, control):
        for step in range(4):
            control(step, 4)
            order.append(f"bg{step}")
            if step == 1:
                background_paused.set()
                resume_steps.wait(10)
        control(4, 4)
        return list(items)

    def foreground_forward(items, control):
        order.append("fg")
        return list(items)

    async def scenario():
        background = _make(background_forward, max_wait_s=0.0, gate=gate, rank=1)
        foreground = _make(foreground_forward, max_wait_s=0.0, gate=gate)
        background.start()
        foreground.start()
        slow = asyncio.ensure_future(background.submit("b"))
        await _thread_event(background_paused)  # background is inside step 1
        fast = asyncio.ensure_future(foreground.submit("f"))
        await _thread_until(lambda: gate.waiting(0) == 1)
        resume_steps.set()  # step 1 ends; step 2 must wait for the foreground forward
        results = await asyncio.gather(fast, slow)
        await background.close()
        await foreground.close()
        return results

    assert asyncio.run(scenario()) == ["f", "b"]
    assert order == ["bg0", "bg1", "fg", "bg2", "bg3"]


class SteppedForward:
    """A forward of ``steps`` steps that records ``(name, step)`` in ``order``; it stops
    inside step ``hold_at`` (``inside`` set) until ``resume`` is set. With ``passes``, each
    step is that many passes with the control's ``pause`` hook called between them (as a
    print's base), and ``(name, step, pass)`` is recorded instead."""

    def __init__(self, name, order, *, steps, hold_at=None, passes=0):
        self.name, self.order = name, order
        self.steps, self.hold_at, self.passes = steps, hold_at, passes
        self.inside, self.resume = threading.Event(), threading.Event()
        self.pauses: list = []

    def __call__(self, items, control):
        for step in range(self.steps):
            control(step, self.steps)
            for part in range(max(1, self.passes)):
                if part:
                    self.pauses.append(control.pause)
                    control.pause()
                self.order.append((self.name, step, part) if self.passes else (self.name, step))
                if step == self.hold_at and part == 0:
                    self.inside.set()
                    assert self.resume.wait(10)
        control(self.steps, self.steps)
        return list(items)


def _ranked(gate, *forwards):
    """A started batcher per forward on ``gate``, ranked in the order given."""
    batchers = [
        _make(forward, max_wait_s=0.0, gate=gate, rank=rank)
        for rank, forward in enumerate(forwards)
    ]
    for batcher in batchers:
        batcher.start()
    return batchers


def test_a_forward_waits_for_one_step_of_each_less_urgent_forward_in_progress():
    """Three ranks on one device: a background forward that arrives inside a bulk step
    runs after that step, before the next; an interactive one that arrives inside the
    background forward's step runs before both go on; the bulk one resumes last."""
    gate = DeviceGate()
    order: list = []
    interactive = SteppedForward("interactive", order, steps=1)
    background = SteppedForward("background", order, steps=3, hold_at=0)
    bulk = SteppedForward("bulk", order, steps=3, hold_at=1)

    async def scenario():
        batchers = _ranked(gate, interactive, background, bulk)
        print_step = asyncio.ensure_future(batchers[2].submit("print"))
        await _thread_event(bulk.inside)  # bulk is inside its step 1
        small = asyncio.ensure_future(batchers[1].submit("small"))
        await _thread_until(lambda: gate.waiting(1) == 1)
        assert order == [("bulk", 0), ("bulk", 1)]  # nothing ran beside the bulk step
        bulk.resume.set()  # step 1 ends; step 2 waits for the background forward
        await _thread_event(background.inside)
        assert gate.paused == 1
        urgent = asyncio.ensure_future(batchers[0].submit("urgent"))
        await _thread_until(lambda: gate.waiting(0) == 1)
        background.resume.set()
        results = await asyncio.gather(urgent, small, print_step)
        for batcher in batchers:
            await batcher.close()
        return results

    assert asyncio.run(scenario()) == ["urgent", "small", "print"]
    assert order == [
        *[("bulk", 0), ("bulk", 1)],
        ("background", 0),
        ("interactive", 0),
        *[("background", 1), ("background", 2)],
        ("bulk", 2),
    ]
    assert gate.paused == 0 and gate.waiting(0) == gate.waiting(1) == gate.waiting(2) == 0


def test_a_step_made_of_passes_yields_between_them_through_the_pause_hook():
    """One bulk step of three passes (a print's base): a background forward that arrives
    inside its first pass runs before its second; the most urgent rank has no hook."""
    gate = DeviceGate()
    order: list = []
    background = SteppedForward("background", order, steps=1)
    base = SteppedForward("bulk", order, steps=1, hold_at=0, passes=3)
    seen_hooks = []

    def interactive(items, control):
        seen_hooks.append(control.pause)
        return list(items)

    async def scenario():
        batchers = _ranked(gate, interactive, background, base)
        step = asyncio.ensure_future(batchers[2].submit("base"))
        await _thread_event(base.inside)
        small = asyncio.ensure_future(batchers[1].submit("small"))
        await _thread_until(lambda: gate.waiting(1) == 1)
        base.resume.set()
        results = await asyncio.gather(small, step, batchers[0].submit("urgent"))
        for batcher in batchers:
            await batcher.close()
        return results

    assert asyncio.run(scenario()) == ["small", "base", "urgent"]
    assert order == [("bulk", 0, 0), ("background", 0), ("bulk", 0, 1), ("bulk", 0, 2)]
    assert all(pause is not None for pause in base.pauses) and seen_hooks == [None]


def test_queued_work_keeps_a_less_urgent_forward_from_its_next_step():
    """A background item still waiting for companions (its batch not yet formed) already
    stops the bulk forward at its next step: the device is not given away between two
    background batches. Once the background batcher has nothing left, the bulk resumes."""
    gate = DeviceGate()
    order: list = []
    bulk = SteppedForward("bulk", order, steps=3, hold_at=0)

    def background(items, control):
        order.append(("background", tuple(items)))
        return list(items)

    async def scenario():
        quick = _make(background, max_batch_size=2, max_wait_s=HOUR, gate=gate, rank=1)
        slow = _make(bulk, max_wait_s=0.0, gate=gate, rank=2)
        quick.start()
        slow.start()
        print_step = asyncio.ensure_future(slow.submit("print"))
        await _thread_event(bulk.inside)
        [first] = await _queue(quick, ["a"])  # waits an hour for a companion
        bulk.resume.set()
        await _thread_until(lambda: gate.paused == 1)  # the bulk stopped before step 1
        assert order == [("bulk", 0)]
        second = asyncio.ensure_future(quick.submit("b"))  # the batch is full: it runs
        results = await asyncio.gather(first, second, print_step)
        await quick.close()
        await slow.close()
        return results

    assert asyncio.run(scenario()) == ["a", "b", "print"]
    assert order == [("bulk", 0), ("background", ("a", "b")), ("bulk", 1), ("bulk", 2)]


def test_a_rank_below_zero_is_refused():
    with pytest.raises(ValueError, match="rank"):
        _make(RecordingForward(), gate=DeviceGate(), rank=-1)


def test_a_deadline_cancel_is_counted_as_a_deadline():
    reasons: list[tuple[str, str]] = []

    class Observer:
        def queue_depth(self, depth):
            pass

        def batch_done(self, size, seconds):
            pass

        def work_done(self, rows):
            pass

        def cancelled(self, reason, stage):
            reasons.append((reason, stage))

    async def scenario():
        gate = threading.Event()
        forward = RecordingForward(gate=gate)
        async with _running(
            forward, max_batch_size=1, max_wait_s=0.0, observer=Observer()
        ) as batcher:
            blocker = await _inside_forward(batcher, forward, 0)
            late, gone = await _queue(batcher, (1, 2))
            late.cancel("deadline")
            gone.cancel()
            await asyncio.gather(late, gone, return_exceptions=True)
            gate.set()
            await blocker

    asyncio.run(scenario())
    assert sorted(reasons) == [("caller_gone", "queued"), ("deadline", "queued")]


def test_a_forward_shows_its_pictures_to_the_items_that_asked_and_only_then():
    """The control has a ``show`` hook only when an item asked for previews; each such
    item gets its own row, and the batch's pictures are read once, only if asked for."""
    hooks = []
    reads = []

    def forward(items, control):
        hooks.append(control.show is not None)
        if control.show is not None:
            control.show(1, 2, lambda: reads.append(1) or [f"picture of {x}" for x in items])
        return [2 * x for x in items]

    seen: dict[int, list] = {1: [], 3: []}

    async def scenario():
        async with _running(forward, max_batch_size=3) as batcher:
            plain = await asyncio.gather(*(batcher.submit(x) for x in (0, 10, 20)))
            watched = await asyncio.gather(
                batcher.submit(1, on_preview=lambda d, t, p: seen[1].append((d, t, p()))),
                batcher.submit(2),
                batcher.submit(3, on_preview=lambda d, t, p: seen[3].append((d, t, p()))),
            )
        return plain, watched

    plain, watched = asyncio.run(scenario())
    assert plain == [0, 20, 40] and watched == [2, 4, 6]
    assert hooks == [False, True]
    assert seen == {1: [(1, 2, "picture of 1")], 3: [(1, 2, "picture of 3")]}
    assert reads == [1]

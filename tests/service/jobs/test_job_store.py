"""The job store's contract, run against both backends: SQLite and a real Redis.

Each test builds its stores inside one event loop; Redis tests keep apart by a fresh
key prefix on the session's server. Leases and lifetimes are short and the tests wait
past them, so no outcome depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

import pytest

from service.jobs.records import (
    CANCELLED,
    FAILED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    JobRecord,
    JobResult,
    Packed,
    new_job_id,
)
from service.jobs.redis_store import RedisJobStore
from service.jobs.sqlite_store import SqliteJobStore
from service.jobs.store import (
    ChangeHub,
    IdempotencyKeyReused,
    IdempotentJobExpired,
    JobStore,
    Refused,
    StoreLimits,
    job_topic,
)
from service.priorities import BACKGROUND, BULK, INTERACTIVE

pytestmark = pytest.mark.timeout(60)
LEASE = 0.3


@pytest.fixture(params=["sqlite", "redis"])
def open_store(request, tmp_path):
    """``open_store(limits)`` -> a started store; every store of one test shares the
    same backing data (the file, or the Redis prefix), as two processes would."""
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    opened: list[JobStore] = []
    redis_url = request.getfixturevalue("redis_server").url if request.param == "redis" else ""

    async def open_(limits: StoreLimits | None = None, hub: ChangeHub | None = None) -> JobStore:
        limits = limits or StoreLimits()
        if request.param == "sqlite":
            store = SqliteJobStore(tmp_path / "jobs.db", limits, hub, poll_s=0.05)
        else:
            store = RedisJobStore(redis_url, limits, hub, prefix=prefix)
        await store.start()
        if isinstance(store, RedisJobStore):
            assert await store.listening()
        opened.append(store)
        return store

    open_.backend = request.param
    open_.opened = opened
    return open_


def run(open_store, scenario: Callable[..., Awaitable]):
    async def main():
        try:
            return await scenario()
        finally:
            for store in open_store.opened:
                await store.close()
            open_store.opened.clear()

    return asyncio.run(main())


def _job(
    owner: str = "alice", *, model: str = "dit", priority: str = BACKGROUND, **kw
) -> JobRecord:
    return JobRecord(
        id=new_job_id(),
        kind="generate",
        model=model,
        owner=owner,
        priority=priority,
        parts=2,
        unit="sampler step",
        parameters={"prompt": "a red circle", "seeds": [1, 2], "ignored": []},
        **kw,
    )


async def _create(store: JobStore, record: JobRecord | None = None, payload=b"input", **kw):
    job, created = await store.create(record or _job(), payload, owner_max_jobs=100, **kw)
    assert created
    return job


def test_a_job_goes_from_queued_to_succeeded_with_its_result_written_once(open_store):
    async def scenario():
        store = await open_store()
        job = await _create(store, payload=b"\x00prepared\xffinput")
        assert (await store.get(job.id)).state == QUEUED
        claim = await store.claim("w1", "dit", (INTERACTIVE, BACKGROUND), LEASE)
        assert claim.record.id == job.id and claim.payload == b"\x00prepared\xffinput"
        assert claim.record.state == RUNNING and claim.record.attempts == 1
        await store.set_progress(job.id, "w1", 3, 10)
        await store.set_progress(job.id, "someone-else", 9, 10)  # not theirs: ignored
        running = await store.get(job.id)
        assert (running.step, running.total, running.worker) == (3, 10, "w1")
        result = JobResult([b"png-1", b"png-2"], "image/png", {"seeds": [1, 2], "ignored": []})
        assert await store.finish(job.id, SUCCEEDED, result=result.packed())
        assert not await store.finish(job.id, FAILED, error={"code": "x", "message": "y"})
        final = await store.get(job.id)
        assert final.state == SUCCEEDED and final.error is None
        assert final.parameters == job.parameters  # JSON fields round-trip (empty lists too)
        back = JobResult.from_bytes(await store.result(job.id))
        assert back == result
        assert await store.claim("w1", "dit", (BACKGROUND,), LEASE) is None

    run(open_store, scenario)


def test_admission_bounds_each_owner_all_jobs_and_queued_bytes(open_store):
    async def scenario():
        store = await open_store(StoreLimits(max_jobs=3, inputs_max_bytes=100))
        await store.create(_job("alice"), b"x", owner_max_jobs=2)
        await store.create(_job("alice"), b"x", owner_max_jobs=2)
        with pytest.raises(Refused) as mine:
            await store.create(_job("alice"), b"x", owner_max_jobs=2)
        with pytest.raises(Refused) as early:
            await store.check_admission("alice", 2)
        await store.check_admission("bob", 2)
        await store.create(_job("bob"), b"x", owner_max_jobs=2)
        with pytest.raises(Refused) as everyone:
            await store.create(_job("carol"), b"x", owner_max_jobs=2)
        # interactive work is bounded by its deadline, not by the job counts...
        await store.create(_job("carol", priority=INTERACTIVE), b"x" * 50, owner_max_jobs=2)
        # ...but its input counts against the bytes
        with pytest.raises(Refused) as size:
            await store.create(_job("carol", priority=INTERACTIVE), b"x" * 50, owner_max_jobs=2)
        return mine.value, early.value, everyone.value, size.value

    mine, early, everyone, size = run(open_store, scenario)
    assert (mine.limit, early.limit) == ("key_max_jobs", "key_max_jobs")
    assert everyone.limit == "max_jobs" and "max_jobs" in str(everyone)
    assert size.limit == "job_inputs_max_bytes"


def test_claims_take_interactive_work_first_then_owners_in_turn(open_store):
    async def scenario():
        store = await open_store()
        backlog = [await _create(store, _job("flood")) for _ in range(4)]
        other = await _create(store, _job("quiet"))
        urgent = await _create(store, _job("flood", priority=INTERACTIVE))
        order = []
        while (
            claim := await store.claim("w", "dit", (INTERACTIVE, BACKGROUND), LEASE)
        ) is not None:
            order.append(claim.record.id)
        return order, [j.id for j in backlog], other.id, urgent.id

    order, backlog, other, urgent = run(open_store, scenario)
    assert order[0] == urgent
    assert order.index(other) <= 2  # after at most one of the flood's jobs
    assert [i for i in order if i in backlog] == backlog  # each owner's jobs in order


def test_a_claim_can_leave_owners_out(open_store):
    """A worker asks for a job of a key it runs nothing of: the skipped owners' jobs stay
    queued, in order, for a later claim."""

    async def scenario():
        store = await open_store()
        flood = [await _create(store, _job("flood")) for _ in range(2)]
        quiet = await _create(store, _job("quiet"))
        first = await store.claim(
            "w", "dit", (BACKGROUND,), LEASE, skip_owners=frozenset({"flood"})
        )
        none_left = await store.claim(
            "w", "dit", (BACKGROUND,), LEASE, skip_owners=frozenset({"flood", "other"})
        )
        rest = [await store.claim("w", "dit", (BACKGROUND,), LEASE) for _ in range(2)]
        return first, none_left, rest, [j.id for j in flood], quiet.id

    first, none_left, rest, flood, quiet = run(open_store, scenario)
    assert first is not None and first.record.id == quiet
    assert none_left is None
    assert [claim.record.id for claim in rest] == flood


def test_a_claim_only_takes_its_model(open_store):
    async def scenario():
        store = await open_store()
        await _create(store, _job(model="adain"))
        assert await store.claim("w", "dit", (BACKGROUND,), LEASE) is None
        assert await store.queue_depths() == {"adain": 1}
        claim = await store.claim("w", "adain", (BACKGROUND,), LEASE)
        return claim, await store.queue_depths()

    claim, depths = run(open_store, scenario)
    assert claim is not None and depths.get("adain", 0) == 0


def test_a_claim_says_whether_jobs_of_its_model_are_still_queued(open_store):
    """``Claim.more``: another job of the model, of any priority or owner (even one this
    claim left out), is queued; a job of another model does not count."""

    async def scenario():
        store = await open_store()
        await _create(store, _job("alice", priority=INTERACTIVE))
        await _create(store, _job("bob"))
        await _create(store, _job("carol", model="adain"))
        takes = ((INTERACTIVE,), frozenset()), ((BACKGROUND,), frozenset())
        mores = [(await store.claim("w", "dit", p, LEASE, skip_owners=s)).more for p, s in takes]
        await _create(store, _job("bob"))
        await _create(store, _job("dave"))
        skipping = await store.claim(
            "w", "dit", (BACKGROUND,), LEASE, skip_owners=frozenset({"dave"})
        )
        last = await store.claim("w", "dit", (BACKGROUND,), LEASE)
        return mores, skipping.record.owner, skipping.more, last.more

    assert run(open_store, scenario) == ([True, False], "bob", True, False)


def test_a_job_created_for_a_worker_runs_there_at_once_and_is_leased_like_a_claim(open_store):
    """``create(run_by=(worker, lease_s))``: the job is running on ``worker`` at once (no
    claim finds it, nothing is queued); its lease renews like a claimed job's, and once
    it runs out the job goes back to the queue with its input."""

    async def scenario():
        store = await open_store()
        job, created = await store.create(
            _job(priority=INTERACTIVE), b"input", owner_max_jobs=100, run_by=("here", LEASE)
        )
        held = await store.get(job.id)
        nothing = await store.claim("other", "dit", (INTERACTIVE, BACKGROUND), LEASE)
        depths = await store.queue_depths()
        renewed = await store.renew("here", [job.id], LEASE)
        await asyncio.sleep(LEASE + 0.2)
        requeued = await store.reap()
        again = await store.claim("other", "dit", (INTERACTIVE,), LEASE)
        return created, job, held, nothing, depths, renewed, requeued, again

    created, job, held, nothing, depths, renewed, requeued, again = run(open_store, scenario)
    assert created and job.state == held.state == RUNNING
    assert (held.worker, held.attempts, job.worker) == ("here", 1, "here")
    assert held.started_at is not None
    assert nothing is None and depths.get("dit", 0) == 0
    assert renewed == (set(), set())
    assert requeued == 1 and again.record.id == job.id
    assert (again.record.attempts, again.payload) == (2, b"input")


def test_a_lost_lease_puts_the_job_back_until_max_attempts(open_store):
    async def scenario():
        store = await open_store(StoreLimits(max_attempts=2))
        job = await _create(store)
        first = await store.claim("dead", "dit", (BACKGROUND,), LEASE)
        await asyncio.sleep(LEASE + 0.2)
        assert await store.reap() == 1
        back = await store.get(job.id)
        assert back.state == QUEUED and back.worker is None
        second = await store.claim("alive", "dit", (BACKGROUND,), LEASE)
        cancelled, lost = await store.renew("dead", [job.id], LEASE)
        assert (cancelled, lost) == (set(), {job.id})  # the first worker learns it lost it
        await asyncio.sleep(LEASE + 0.2)
        await store.reap()
        return first, second, await store.get(job.id)

    first, second, final = run(open_store, scenario)
    assert (first.record.attempts, second.record.attempts) == (1, 2)
    assert second.payload == b"input"
    assert final.state == FAILED and final.error["code"] == "worker_lost"


def test_renewed_leases_do_not_run_out(open_store):
    async def scenario():
        store = await open_store()
        job = await _create(store)
        await store.claim("w", "dit", (BACKGROUND,), LEASE)
        for _ in range(4):
            await asyncio.sleep(LEASE / 2)
            assert await store.renew("w", [job.id], LEASE) == (set(), set())
            assert await store.reap() == 0
        return await store.get(job.id)

    assert run(open_store, scenario).state == RUNNING


def test_a_released_job_is_claimed_again_without_counting_an_attempt(open_store):
    async def scenario():
        store = await open_store()
        job = await _create(store)
        await store.claim("draining", "dit", (BACKGROUND,), LEASE)
        await store.release("draining", [job.id])
        again = await store.claim("other", "dit", (BACKGROUND,), LEASE)
        return again.record

    record = run(open_store, scenario)
    assert record.worker == "other" and record.attempts == 1


def test_cancel_stops_a_queued_job_at_once_and_asks_a_running_one(open_store):
    async def scenario():
        store = await open_store()
        queued = await _create(store)
        running = await _create(store)
        now_cancelled = await store.cancel(queued.id)
        claim = await store.claim("w", "dit", (BACKGROUND,), LEASE)
        assert claim.record.id == running.id  # the cancelled job left the queue
        asked = await store.cancel(running.id)
        cancelled, lost = await store.renew("w", [running.id], LEASE)
        return now_cancelled, asked, cancelled, await store.queue_depths()

    now_cancelled, asked, cancelled, depths = run(open_store, scenario)
    assert now_cancelled.state == CANCELLED and now_cancelled.finished_at is not None
    assert asked.state == RUNNING and asked.cancel_requested
    assert cancelled == {asked.id}
    assert depths.get("dit", 0) == 0


def test_cancelled_jobs_free_their_owners_slot(open_store):
    async def scenario():
        store = await open_store()
        job, _ = await store.create(_job("alice"), b"x", owner_max_jobs=1)
        with pytest.raises(Refused):
            await store.create(_job("alice"), b"x", owner_max_jobs=1)
        await store.cancel(job.id)
        await store.create(_job("alice"), b"x", owner_max_jobs=1)

    run(open_store, scenario)


def test_idempotent_creates_replay_the_same_job(open_store):
    async def scenario():
        store = await open_store()
        first, created = await store.create(
            _job("alice"), b"x", owner_max_jobs=10, idempotency=("key-1", "fp-a")
        )
        again, created_again = await store.create(
            _job("alice"), b"x", owner_max_jobs=10, idempotency=("key-1", "fp-a")
        )
        with pytest.raises(IdempotencyKeyReused):
            await store.create(
                _job("alice"), b"y", owner_max_jobs=10, idempotency=("key-1", "fp-b")
            )
        # the same key of another owner is another key
        theirs, theirs_created = await store.create(
            _job("bob"), b"x", owner_max_jobs=10, idempotency=("key-1", "fp-a")
        )
        return first, created, again, created_again, theirs, theirs_created

    first, created, again, created_again, theirs, theirs_created = run(open_store, scenario)
    assert created and not created_again and again.id == first.id
    assert theirs_created and theirs.id != first.id


def test_a_replay_after_the_job_was_forgotten_says_so(open_store):
    async def scenario():
        store = await open_store(StoreLimits(ttl_s=0.2))
        job, _ = await store.create(_job(), b"x", owner_max_jobs=10, idempotency=("k", "fp"))
        await store.cancel(job.id)
        await asyncio.sleep(0.4)
        assert await store.get(job.id) is None
        await store.reap()
        with pytest.raises(IdempotentJobExpired):
            await store.create(_job(), b"x", owner_max_jobs=10, idempotency=("k", "fp"))

    run(open_store, scenario)


def test_results_are_bounded_in_bytes_oldest_finished_first(open_store):
    async def scenario():
        store = await open_store(StoreLimits(results_max_bytes=250))
        jobs = [await _create(store) for _ in range(3)]
        for job in jobs:
            await store.claim("w", "dit", (BACKGROUND,), LEASE)
            await store.finish(job.id, SUCCEEDED, result=Packed((b"r" * 100,)))
        return [await store.get(job.id) for job in jobs]

    first, second, third = run(open_store, scenario)
    assert first is None  # pushed out by the third result
    assert second.state == third.state == SUCCEEDED


def test_finished_jobs_expire_and_can_be_deleted(open_store):
    async def scenario():
        store = await open_store(StoreLimits(ttl_s=0.3))
        old = await _create(store)
        await store.cancel(old.id)
        kept = await _create(store)
        running = await _create(store, _job("bob"))
        await store.cancel(kept.id)
        assert not await store.delete(running.id)  # unfinished: cancel it instead
        assert await store.delete(kept.id)
        assert await store.get(kept.id) is None and not await store.delete(kept.id)
        await asyncio.sleep(0.5)
        await store.reap()
        return await store.get(old.id), await store.get(running.id)

    old, running = run(open_store, scenario)
    assert old is None and running.state == QUEUED


def test_queued_work_past_its_deadline_fails(open_store):
    async def scenario():
        store = await open_store()
        job = await _create(store, _job(deadline_at=time.time() + 0.2))
        await asyncio.sleep(0.4)
        await store.reap()
        return await store.get(job.id), await store.claim("w", "dit", (BACKGROUND,), LEASE)

    late, claim = run(open_store, scenario)
    assert late.state == FAILED and late.error["code"] == "deadline_exceeded"
    assert claim is None


def test_an_owners_recent_jobs_newest_first(open_store):
    async def scenario():
        store = await open_store()
        mine = [await _create(store, _job("alice")) for _ in range(3)]
        await _create(store, _job("bob"))
        await _create(store, _job("alice", priority=INTERACTIVE))  # not a job they made
        listed = await store.jobs_of("alice", 2)
        return [j.id for j in mine], [j.id for j in listed]

    mine, listed = run(open_store, scenario)
    assert listed == [mine[2], mine[1]]


def test_the_rate_limit_allows_a_burst_then_asks_to_wait(open_store):
    async def scenario():
        store = await open_store()
        waits = [await store.take_token("alice", 1.0, 2) for _ in range(3)]
        other = await store.take_token("bob", 1.0, 2)
        return waits, other

    waits, other = run(open_store, scenario)
    assert waits[:2] == [0.0, 0.0] and 0.5 < waits[2] <= 1.0
    assert other == 0.0


def test_webhook_deliveries_fall_due_on_completion_and_progress(open_store):
    async def scenario():
        store = await open_store()
        done = await _create(store, _job(webhook={"url": "http://x", "events": ["completed"]}))
        chatty = await _create(
            store, _job("bob", webhook={"url": "http://x", "events": ["completed", "progress"]})
        )
        quiet = await _create(store, _job("carol"))
        for _ in range(3):
            await store.claim("w", "dit", (BACKGROUND,), LEASE)
        for job in (done, chatty, quiet):
            await store.set_progress(job.id, "w", 1, 4)
        progress = await store.due_webhooks(60.0, 10)
        for job in (done, chatty, quiet):
            await store.finish(job.id, SUCCEEDED, result=Packed((b"r",)))
        # the progress delivery ends after the completion fell due: the completion stays due
        record = {"url": "http://x", "events": ["completed", "progress"], "last_status": 200}
        for delivery in progress:
            await store.update_webhook(delivery.record.id, record, None, lease=delivery.lease)
        completed = await store.due_webhooks(60.0, 10)
        hidden = await store.due_webhooks(60.0, 10)  # taken: hidden for the lease
        for delivery in completed:
            await store.update_webhook(delivery.record.id, record, None, lease=delivery.lease)
        return progress, completed, hidden, await store.get(chatty.id), done, chatty

    progress, completed, hidden, updated, done, chatty = run(open_store, scenario)
    assert {d.record.id for d in progress} == {chatty.id}
    assert {d.record.id for d in completed} == {done.id, chatty.id}
    assert hidden == [] and updated.webhook["last_status"] == 200


def test_models_are_known_after_their_worker_left_but_not_served(open_store):
    async def scenario():
        store = await open_store()
        await store.publish_models("w1", {"dit": {"image_size": 32}}, ttl_s=60)
        served = await store.models()
        await store.withdraw("w1")
        left = await store.models()
        return served, left

    served, left = run(open_store, scenario)
    assert served == {"dit": ({"image_size": 32}, True)}
    assert left == {"dit": ({"image_size": 32}, False)}


def test_jobs_outlive_the_store_object_and_changes_reach_another(open_store):
    """Two store objects on the same data are two processes: what one writes the other
    reads, and its waiters wake."""

    async def scenario():
        writer = await open_store()
        hub = ChangeHub()
        reader = await open_store(hub=hub)
        job = await _create(writer)
        with hub.watch(job_topic(job.id)) as watch:
            await writer.claim("w", "dit", (BACKGROUND,), LEASE)
            woke = await watch.wait(5.0)
        await writer.close()
        open_store.opened.remove(writer)
        return woke, await reader.get(job.id)

    woke, seen = run(open_store, scenario)
    assert woke and seen.state == RUNNING


def test_every_pooled_connection_recovers_when_redis_comes_back(own_redis):
    """A Redis restart leaves every pooled connection stale. Once it is back, each call
    reconnects and is retried, so concurrent calls all succeed at once (the client
    had been given the synchronous client's retry policy, under which the asyncio
    client retried nothing, and one in several calls after a restart answered 503)."""
    server = own_redis

    async def scenario():
        store = RedisJobStore(server.url, StoreLimits(), prefix="restart:")
        await store.start()
        try:
            owners = [f"owner-{index}" for index in range(8)]
            await asyncio.gather(*(store.check_admission(owner, 100) for owner in owners))
            server.restart()
            await asyncio.gather(*(store.check_admission(owner, 100) for owner in owners))
            return await store.models()
        finally:
            await store.close()

    assert asyncio.run(scenario()) == {}


def test_bulk_jobs_are_async_jobs_claimed_only_when_asked_for(open_store):
    """A print's job is queued as ``BULK``: it counts against its key's ``max_jobs`` and
    is listed with the key's jobs like a background job, but a claim takes it only when
    it names ``BULK`` (a worker with a free bulk slot), after the other priorities; while
    it waits, a claim says more work is queued. Finishing it frees its key's room."""

    async def scenario():
        store = await open_store(StoreLimits(max_jobs=10))
        created = []
        for priority in (BULK, BULK, BACKGROUND):
            job, _ = await store.create(_job("alice", priority=priority), b"x", owner_max_jobs=3)
            created.append(job.id)
        with pytest.raises(Refused) as full:
            await store.create(_job("alice", priority=BULK), b"x", owner_max_jobs=3)
        listed = {job.id for job in await store.jobs_of("alice", 10)}
        without = await store.claim("w", "dit", (INTERACTIVE, BACKGROUND), LEASE)
        nothing = await store.claim("w", "dit", (INTERACTIVE, BACKGROUND), LEASE)
        bulk = await store.claim("w", "dit", (INTERACTIVE, BACKGROUND, BULK), LEASE)
        assert await store.finish(bulk.record.id, SUCCEEDED, result=Packed((b"done",)))
        again, _ = await store.create(_job("alice", priority=BULK), b"x", owner_max_jobs=3)
        return created, full.value.limit, listed, without, nothing, bulk, again

    created, full, listed, without, nothing, bulk, again = run(open_store, scenario)
    assert full == "key_max_jobs"
    assert set(created) <= listed
    assert without.record.id == created[2] and without.more  # the bulk jobs still wait
    assert nothing is None
    assert bulk.record.id == created[0] and bulk.record.priority == BULK and bulk.more
    assert again.priority == BULK

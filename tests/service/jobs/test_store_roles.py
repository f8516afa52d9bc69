"""The store's four roles: how they are split, the rules both back ends share, and the
announcements every back end makes the same way (``service.jobs.roles``, ``.shared``).

The store's behaviour is ``test_job_store.py``'s, run against both back ends; here: that
each back end plays each role in a module of its own, that the shared rules say what
the back ends did (the refusals, the rate limiter), and that a change this process
makes wakes its waiters at once on both back ends (Redis without its listener).
"""

from __future__ import annotations

import asyncio
import inspect
import uuid

import pytest

from service.jobs import roles
from service.jobs.records import JobRecord, new_job_id
from service.jobs.redis_store import RedisJobStore
from service.jobs.shared import Occupancy, Refused, StoreLimits, admit, gcra, lease_to
from service.jobs.sqlite_store import SqliteJobStore
from service.jobs.store import ChangeHub, JobStore, cancel_topic, job_topic, work_topic
from service.priorities import BACKGROUND, INTERACTIVE

pytestmark = pytest.mark.timeout(60)

ROLES = {
    "queue": roles.JobQueue,
    "tokens": roles.RateLimits,
    "directory": roles.ModelDirectory,
    "outbox": roles.WebhookOutbox,
}


def _own_methods(role: type) -> set[str]:
    """The methods a role declares (its public ones and its back end's steps)."""
    return {name for name, value in vars(role).items() if inspect.isfunction(value)}


@pytest.mark.parametrize("store", [SqliteJobStore, RedisJobStore], ids=["sqlite", "redis"])
def test_each_back_end_plays_each_role_in_a_module_of_its_own(store):
    assert issubclass(store, JobStore) and not inspect.isabstract(store)
    package = store.__module__
    for module, role in ROLES.items():
        assert issubclass(JobStore, role)
        for name in _own_methods(role):
            defined_by = getattr(store, name).__module__
            if name in role.__abstractmethods__:  # the back end's, in its role's module
                assert defined_by == f"{package}.{module}", (role.__name__, name)
            else:  # written once, for every back end
                assert defined_by == roles.__name__, (role.__name__, name)


def test_every_role_stands_on_the_backend_alone():
    """A caller typed with one role gets the connection's lifecycle and clock, and
    nothing of the other roles."""
    for role in ROLES.values():
        assert role.__mro__[1] is roles.Backend
        others = set().union(*(_own_methods(r) for r in ROLES.values() if r is not role))
        assert not others & set(dir(role))


LIMITS = StoreLimits(max_jobs=3, inputs_max_bytes=100)


def _refused(held: Occupancy, **kw) -> Refused | None:
    try:
        admit(LIMITS, held, 2, **kw)
    except Refused as exc:
        return exc
    return None


def test_admission_refuses_by_the_owner_everyone_and_the_queued_bytes():
    mine = _refused(Occupancy(mine=2, everyone=2, input_bytes=0))
    assert mine is not None and mine.limit == "key_max_jobs"
    assert mine.message == "this key has 2 unfinished jobs, its limit (max_jobs of the key)"
    everyone = _refused(Occupancy(mine=0, everyone=3, input_bytes=0))
    assert everyone is not None and everyone.limit == "max_jobs"
    assert "3 are queued or running (max_jobs)" in everyone.message
    # interactive work is bounded by its deadline, not by the job counts...
    assert _refused(Occupancy(2, 3, 0), priority=INTERACTIVE, size=10) is None
    # ...but its input counts against the bytes
    size = _refused(Occupancy(0, 0, 95), priority=INTERACTIVE, size=10)
    assert size is not None and size.limit == "job_inputs_max_bytes"
    assert size.status_code == 429


def test_the_early_check_refuses_once_the_queued_inputs_are_at_their_bound():
    """Before the input is decoded its size is unknown: inputs at the bound refuse (the
    Redis store's rule; SQLite refused only past it, and then at the create)."""
    assert _refused(Occupancy(0, 0, 99)) is None
    assert _refused(Occupancy(0, 0, 100)).limit == "job_inputs_max_bytes"
    assert _refused(Occupancy(0, 0, 100), size=0) is None  # a create: what it adds
    assert _refused(Occupancy(0, 0, 99), size=2).limit == "job_inputs_max_bytes"


def test_the_rate_limiter_spends_a_burst_then_one_token_per_interval():
    tat, now, waits = None, 100.0, []
    for _ in range(4):  # rate 2/s, burst 3: three at once, the fourth waits half a second
        wait, next_tat = gcra(tat, now, 2.0, 3.0)
        waits.append(wait)
        if not wait:
            tat = next_tat
    assert waits == [0.0, 0.0, 0.0, pytest.approx(0.5)]
    assert gcra(tat, now + 0.5, 2.0, 3.0)[0] == 0.0
    assert gcra(50.0, now, 2.0, 1.0) == (0.0, now + 0.5)  # an old arrival time: full


def test_a_lease_counts_an_attempt_and_keeps_the_first_start():
    record = JobRecord(id="j", kind="generate", model="dit", owner="a")
    lease_to(record, "w1", 10.0)
    lease_to(record, "w2", 20.0)
    assert (record.state, record.worker, record.attempts, record.started_at) == (
        "running",
        "w2",
        2,
        10.0,
    )
    assert StoreLimits(ttl_s=5).expired(10.0, 15.0) and not StoreLimits(ttl_s=5).expired(10.0, 14.9)
    assert not StoreLimits().expired(None, 1e12)


# ------------------------------------------------------------ both back ends, live
@pytest.fixture(params=["sqlite", "redis"])
def make_store(request, tmp_path):
    """``make_store(hub)`` -> a store whose own announcements are the only ones its hub
    hears: SQLite (which hears only other processes' writes), or Redis not started (no
    listener: the client connects on its first command)."""
    redis_url = request.getfixturevalue("redis_server").url if request.param == "redis" else ""

    async def make(hub: ChangeHub) -> JobStore:
        if request.param == "sqlite":
            store: JobStore = SqliteJobStore(tmp_path / "jobs.db", StoreLimits(), hub)
            await store.start()
            return store
        return RedisJobStore(redis_url, StoreLimits(), hub, prefix=f"roles-{uuid.uuid4().hex}:")

    return make


def _job(owner: str = "alice") -> JobRecord:
    return JobRecord(id=new_job_id(), kind="generate", model="dit", owner=owner)


def test_a_change_this_process_makes_wakes_its_waiters_at_once(make_store):
    async def scenario() -> list[str]:
        hub = ChangeHub()
        store = await make_store(hub)
        heard: list[str] = []
        try:
            job, _ = await store.create(_job(), b"input", owner_max_jobs=10)
            steps = {
                work_topic("dit"): None,
                job_topic(job.id): store.claim("w1", "dit", (BACKGROUND,), 30.0),
                cancel_topic(job.id): store.cancel(job.id),
            }
            for topic, step in steps.items():
                with hub.watch(topic) as watch:
                    if step is None:  # the create, again, for its work topic
                        await store.create(_job(), b"input", owner_max_jobs=10)
                    else:
                        await step
                    if await watch.wait(0):
                        heard.append(topic.split(":")[0])
            with hub.watch(job_topic(job.id)) as watch:
                await store.set_progress(job.id, "w1", 1, 2)
                if await watch.wait(0):
                    heard.append("progress")
        finally:
            await store.close()
        return heard

    assert asyncio.run(scenario()) == ["work", "job", "cancel", "progress"]


def test_a_dead_workers_advertisement_is_pruned_at_the_next_one(make_store):
    async def advertised(store: JobStore) -> set[str]:
        if isinstance(store, RedisJobStore):
            return {k.decode() for k in await store._redis.hkeys(store._key("workers"))}
        assert isinstance(store, SqliteJobStore)
        rows = await store._run(lambda: store._db.execute("SELECT id FROM workers").fetchall())
        return {row["id"] for row in rows}

    async def scenario() -> tuple[set[str], set[str], dict]:
        store = await make_store(ChangeHub())
        try:
            await store.publish_models("gone", {"dit": {}}, ttl_s=0.05)
            before = await advertised(store)
            await asyncio.sleep(0.2)
            await store.publish_models("live", {"dit": {}}, ttl_s=60)
            return before, await advertised(store), await store.models()
        finally:
            await store.close()

    before, after, models = asyncio.run(scenario())
    assert before == {"gone"} and after == {"live"}
    assert models == {"dit": ({}, True)}

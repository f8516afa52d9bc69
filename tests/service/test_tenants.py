"""Tenants: named keys, jobs owned by their key, quotas, fair share, idempotent submits,
signed webhooks and their SSRF guards (fake models, one process)."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import uuid

import pytest
from api_headers import ASYNC
from service_fakes import wait_until
from standardwebhooks.webhooks import Webhook

from service.cli import main as atelier
from service.jobs.records import JobRecord
from service.jobs.store import Delivery
from service.jobs.webhooks import (
    EVENTS,
    EVENTS_PATTERN,
    WebhookDispatcher,
    WebhookPolicy,
    WebhookRefused,
    WebhookSettings,
    check_target,
    parse_events,
)
from service.keys import KeyFile, KeyRing

pytestmark = pytest.mark.timeout(60)
SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def keys(tmp_path):
    """A keys file with alice (2 unfinished jobs at most) and bob; their tokens."""
    file = KeyFile(tmp_path / "keys.json")
    return file, {"alice": file.add("alice", max_jobs=2), "bob": file.add("bob")}


def _events(client, job_id: str, headers) -> list[str]:
    with client.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers) as stream:
        return [
            line.split(":", 1)[1].strip()
            for line in stream.iter_lines()
            if line.startswith("event:")
        ]


# ------------------------------------------------------------------------ keys
def test_the_keys_file_keeps_hashes_never_keys(tmp_path, capsys):
    path = tmp_path / "keys.json"
    assert (
        atelier(["keys", "add", "carol", "--max-jobs", "3", "--rate", "2", "--file", str(path)])
        == 0
    )
    token = capsys.readouterr().out.strip()
    assert token.startswith("atl_") and len(token) > 40
    assert token not in path.read_text()
    assert atelier(["keys", "add", "carol", "--file", str(path)]) == 2  # names are unique
    assert atelier(["keys", "list", "--file", str(path)]) == 0
    listed = capsys.readouterr().out
    assert "carol\tactive\tmax_jobs=3 rate=2.0" in listed and token not in listed
    ring = KeyRing(path, None)
    assert ring.identify(token).name == "carol"
    assert ring.identify(token + "x") is None
    assert atelier(["keys", "revoke", "carol", "--file", str(path)]) == 0
    assert ring.identify(token) is None  # the file changed: re-read, the key refused


def test_each_key_sees_only_its_own_jobs(client_factory, keys):
    file, tokens = keys
    client = client_factory(api_keys_file=file.path)
    alice, bob = _bearer(tokens["alice"]), _bearer(tokens["bob"])
    assert client.post("/v1/generate", json={"prompt": "a"}).status_code == 401
    job = client.post("/v1/generate", json={"prompt": "a"}, headers={**ASYNC, **alice}).json()
    assert job["owner"] == "alice"
    assert _events(client, job["id"], alice)[-1] == "done"
    for method, path in [
        ("GET", f"/v1/jobs/{job['id']}"),
        ("GET", f"/v1/jobs/{job['id']}/events"),
        ("DELETE", f"/v1/jobs/{job['id']}"),
    ]:
        theirs = client.request(method, path, headers=bob)
        unknown = client.request(method, path.replace(job["id"], "0" * 32), headers=bob)
        assert theirs.status_code == unknown.status_code == 404  # no existence leak
        assert theirs.json()["error"]["code"] == "job_not_found"
    assert client.get(f"/v1/jobs/{job['id']}", headers=alice).status_code == 200
    assert [j["id"] for j in client.get("/v1/jobs", headers=alice).json()["jobs"]] == [job["id"]]
    assert client.get("/v1/jobs", headers=bob).json()["jobs"] == []
    assert client.get("/v1/me", headers=bob).json()["key"] == "bob"
    metrics = client.get("/metrics", headers=alice).text
    assert 'key="alice"' in metrics and tokens["alice"] not in metrics


def test_a_revoked_key_is_refused_at_once_and_a_new_one_works(client_factory, keys):
    file, tokens = keys
    client = client_factory(api_keys_file=file.path)
    assert client.get("/v1/me", headers=_bearer(tokens["bob"])).status_code == 200
    file.revoke("bob")
    assert client.get("/v1/me", headers=_bearer(tokens["bob"])).status_code == 401
    dave = file.add("dave")
    assert client.get("/v1/me", headers=_bearer(dave)).json()["key"] == "dave"
    client.app.state.keys.reload()  # what SIGHUP does: nothing changes, nothing breaks
    assert client.get("/v1/me", headers=_bearer(dave)).status_code == 200


def test_the_single_api_key_is_the_key_named_default(client_factory):
    client = client_factory(api_key="sesame")
    assert client.get("/v1/me", headers=_bearer("sesame")).json()["key"] == "default"
    assert client.get("/v1/me", headers=_bearer("sesam")).status_code == 401


# ------------------------------------------------------------------ quotas
def test_a_keys_unfinished_jobs_are_bounded(client_factory, fakes, keys):
    file, tokens = keys
    client = client_factory(api_keys_file=file.path)
    alice, bob = {**ASYNC, **_bearer(tokens["alice"])}, {**ASYNC, **_bearer(tokens["bob"])}
    client.post("/v1/generate", json={"prompt": "w"}, headers=_bearer(tokens["bob"]))
    fakes.dit["cpu"].step_gate = threading.Semaphore(0)
    held = [
        client.post("/v1/generate", json={"prompt": "a", "steps": 3}, headers=alice)
        for _ in range(2)
    ]
    over = client.post("/v1/generate", json={"prompt": "a"}, headers=alice)
    others = client.post("/v1/generate", json={"prompt": "b"}, headers=bob)
    assert [r.status_code for r in held] == [202, 202]
    assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1
    assert "max_jobs" in over.json()["error"]["message"]
    assert others.status_code == 202  # bob has room of his own
    for response in (*held, others):
        client.delete(
            f"/v1/jobs/{response.json()['id']}",
            headers=_bearer(tokens["alice"] if response in held else tokens["bob"]),
        )
    for _ in range(30):
        fakes.dit["cpu"].step_gate.release()
    fakes.dit["cpu"].step_gate = None


def test_a_keys_request_rate_is_bounded(client_factory, tmp_path):
    file = KeyFile(tmp_path / "keys.json")
    token = file.add("slow", rate=0.2)
    client = client_factory(api_keys_file=file.path)
    first = client.post("/v1/generate", json={"prompt": "a"}, headers=_bearer(token))
    second = client.post("/v1/generate", json={"prompt": "a"}, headers=_bearer(token))
    assert first.status_code == 200
    assert second.status_code == 429 and second.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(second.headers["Retry-After"]) <= 5
    assert client.get("/v1/me", headers=_bearer(token)).status_code == 200  # reads are free


def test_one_keys_backlog_does_not_delay_another_keys_job(client_factory, fakes, keys):
    """bob's one job runs next after the batch in flight, not after alice's backlog."""
    file, tokens = keys
    file.revoke("alice")
    busy = file.add("busy", max_jobs=10)
    client = client_factory(api_keys_file=file.path, max_batch_size=1, max_batch_wait_ms=0.0)
    model = fakes.dit["cpu"]
    model.step_gate = threading.Semaphore(0)
    backlog = [
        client.post(
            "/v1/generate",
            json={"prompt": f"busy {i}", "steps": 1},
            headers={**ASYNC, **_bearer(busy)},
        ).json()
        for i in range(5)
    ]
    wait_until(lambda: len(model.calls) == 1)  # the first backlog job is in the model
    other = client.post(
        "/v1/generate",
        json={"prompt": "bob", "steps": 1},
        headers={**ASYNC, **_bearer(tokens["bob"])},
    ).json()
    for _ in range(6):
        model.step_gate.release()
    assert _events(client, other["id"], _bearer(tokens["bob"]))[-1] == "done"
    for job in backlog:
        assert _events(client, job["id"], _bearer(busy))[-1] == "done"
    model.step_gate = None
    prompts = [call["prompts"][0] for call in model.calls]
    assert prompts.index("bob") <= 2  # after the job in flight (and at most one claimed)


def test_a_waiting_keys_job_takes_the_device_from_another_keys_batch(client_factory, fakes, keys):
    """busy's background batch holds the device (its steps wait on a gate); bob's job,
    of a key with nothing running, is claimed past the one-batch bound and runs at once,
    at the batch's next step, not after it."""
    file, tokens = keys
    busy = file.add("busy", max_jobs=10)
    client = client_factory(api_keys_file=file.path, max_batch_size=1, max_batch_wait_ms=0.0)
    model = fakes.dit["cpu"]
    model.gate_only, model.step_gate = "background", threading.Semaphore(0)
    busy_headers = {**ASYNC, **_bearer(busy)}
    backlog = [
        client.post("/v1/generate", json={"prompt": f"busy {i}", "steps": 3}, headers=busy_headers)
        for i in range(3)
    ]
    wait_until(lambda: len(model.calls) == 1)  # busy's first job is in the model
    bob = _bearer(tokens["bob"])
    other = client.post(
        "/v1/generate", json={"prompt": "bob", "steps": 1}, headers={**ASYNC, **bob}
    )
    bob_job = f"/v1/jobs/{other.json()['id']}"
    wait_until(lambda: client.get(bob_job, headers=bob).json()["state"] == "running")
    gate = client.app.state.pools["dit"].batchers["cpu"]["interactive"]._gate
    wait_until(lambda: gate.waiting(0) == 1)  # bob's forward waits for the device
    model.step_gate.release(2)  # busy's steps 0 and 1; the device is bob's between them
    wait_until(lambda: client.get(bob_job, headers=bob).json()["state"] == "succeeded")
    first = client.get(f"/v1/jobs/{backlog[0].json()['id']}", headers=_bearer(busy)).json()
    assert first["state"] == "running"  # its last step waits for the gate
    wait_until(lambda: len(model.steps_by) == 3)
    assert model.steps_by == [("background", 0), ("interactive", 0), ("background", 1)]
    for _ in range(20):
        model.step_gate.release()
    for response in backlog:
        assert _events(client, response.json()["id"], _bearer(busy))[-1] == "done"
    model.step_gate, model.gate_only = None, None


# ------------------------------------------------------------- idempotency
def test_an_idempotency_key_replays_the_first_job_and_refuses_another_request(client_factory, keys):
    file, tokens = keys
    client = client_factory(api_keys_file=file.path)
    alice = {**ASYNC, **_bearer(tokens["alice"]), "Idempotency-Key": '"retry-1"'}
    first = client.post("/v1/generate", json={"prompt": "a cat", "seed": 4}, headers=alice)
    again = client.post("/v1/generate", json={"prompt": "a cat", "seed": 4}, headers=alice)
    assert first.status_code == again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    other = client.post("/v1/generate", json={"prompt": "a dog", "seed": 4}, headers=alice)
    assert other.status_code == 422 and other.json()["error"]["code"] == "idempotency_key_reused"
    bobs = client.post(
        "/v1/generate",
        json={"prompt": "a cat", "seed": 4},
        headers={**ASYNC, **_bearer(tokens["bob"]), "Idempotency-Key": "retry-1"},
    )
    assert bobs.status_code == 202 and bobs.json()["id"] != first.json()["id"]  # per key


def test_a_synchronous_retry_with_the_same_key_gets_the_same_answer_computed_once(client, fakes):
    headers = {"Idempotency-Key": "sync-1"}
    body = {"prompt": "a red circle", "seed": 9, "num_images": 2}
    first = client.post("/v1/generate", json=body, headers=headers)
    calls = len(fakes.dit["cpu"].calls)
    again = client.post("/v1/generate", json=body, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.json()["images"] == first.json()["images"]
    assert len(fakes.dit["cpu"].calls) == calls  # not computed again
    openai = client.post(
        "/v1/images/generations", json={"prompt": "a red circle", "seed": 9}, headers=headers
    )
    # the same key on another route is the key reused for another request
    assert openai.status_code == 400  # OpenAI's status for invalid requests
    assert openai.json()["error"]["code"] == "idempotency_key_reused"


def test_a_malformed_idempotency_key_is_refused(client):
    response = client.post(
        "/v1/generate", json={"prompt": "a"}, headers={"Idempotency-Key": "x" * 300}
    )
    assert response.status_code == 422


# ----------------------------------------------------------------- webhooks
class Receiver:
    """An HTTP receiver on 127.0.0.1 that answers each POST with the next planned status."""

    def __init__(self, statuses: list[int], redirect_to: str | None = None) -> None:
        self.statuses = list(statuses)
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self.got = threading.Condition()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the stdlib's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                with receiver.got:
                    receiver.received.append((self.path, dict(self.headers), body))
                    receiver.got.notify_all()
                self.send_response(status)
                if redirect_to is not None:
                    self.send_header("Location", redirect_to)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, count: int, timeout: float = 20) -> bool:
        with self.got:
            return self.got.wait_for(lambda: len(self.received) >= count, timeout)

    def close(self) -> None:
        self.server.shutdown()


def _hooked(client_factory, **overrides):
    settings = {
        "webhook_secret": SECRET,
        "webhook_allowed_hosts": ["127.0.0.1"],
        "webhook_allow_private_addresses": True,
        "webhook_retry_base_s": 0.05,
        "webhook_progress_interval_s": 0.01,
    }
    return client_factory(**(settings | overrides))


def test_a_webhook_is_signed_retried_and_recorded(client_factory):
    receiver = Receiver([500, 503, 200])
    client = _hooked(client_factory)
    job = client.post(
        "/v1/generate",
        json={"prompt": "a cat", "webhook": f"{receiver.url}/hooks?x=1"},
        headers=ASYNC,
    ).json()
    assert receiver.wait_for(3)
    receiver.close()
    path, headers, body = receiver.received[-1]
    assert path == "/hooks?x=1"
    event = Webhook(SECRET).verify(body, {k.lower(): v for k, v in headers.items()})
    assert event["type"] == "job.completed" and event["data"]["id"] == job["id"]
    assert event["data"]["state"] == "succeeded" and "images" not in json.dumps(event)
    ids = {h["webhook-id"] for _, h, _ in receiver.received}
    assert ids == {f"{job['id']}.completed"}  # the same id on every retry
    wait_until(lambda: client.get(f"/v1/jobs/{job['id']}").json()["webhook"].get("delivered"))
    record = client.get(f"/v1/jobs/{job['id']}").json()["webhook"]
    assert record["last_status"] == 200 and record["delivered"] == [f"{job['id']}.completed"]
    assert "url" not in record


def test_progress_webhooks_are_opt_in(client_factory, fakes):
    receiver = Receiver([])
    client = _hooked(client_factory)
    client.post("/v1/generate", json={"prompt": "w"})
    fakes.dit["cpu"].step_gate = threading.Semaphore(2)  # steps 0 and 1, then held
    chatty = {"prompt": "a", "steps": 4, "webhook": receiver.url}
    client.post(
        "/v1/generate", json=chatty | {"webhook_events": ["progress", "completed"]}, headers=ASYNC
    )
    assert receiver.wait_for(1)  # a progress event while the job is held
    for _ in range(10):
        fakes.dit["cpu"].step_gate.release()
    wait_until(
        lambda: any(json.loads(b)["type"] == "job.completed" for _, _, b in receiver.received)
    )
    quiet = len(receiver.received)
    client.post("/v1/generate", json=chatty, headers=ASYNC)  # completed only (the default)
    assert receiver.wait_for(quiet + 1)
    receiver.close()
    fakes.dit["cpu"].step_gate = None
    types = [json.loads(body)["type"] for _, _, body in receiver.received]
    assert types[0] == "job.progress" and types[quiet - 1] == "job.completed"
    assert types[quiet:] == ["job.completed"]


def test_a_form_asks_for_webhook_events_as_a_json_body_does(client_factory):
    """``webhook_events`` is a list in a JSON body and comma-separated text in a form: the
    form's pattern and reading come from the same event names, and both requests record
    the same events on their jobs."""
    import re

    import corpus

    for text, events in [
        ("completed", ["completed"]),
        (" progress ", ["progress"]),
        ("progress , completed", ["progress", "completed"]),
        ("completed,progress", ["completed", "progress"]),
    ]:
        assert re.fullmatch(EVENTS_PATTERN, text) and parse_events(text) == events
    assert all(re.fullmatch(EVENTS_PATTERN, event) for event in EVENTS)
    for bad in ("complete", "progress,,completed", "completed,progress,completed", ""):
        assert not re.fullmatch(EVENTS_PATTERN, bad)
    assert parse_events(None) is None

    receiver = Receiver([])
    client = _hooked(client_factory)
    hook = {"webhook": receiver.url}
    made = client.post(
        "/v1/generate",
        json={"prompt": "a", "webhook_events": ["progress", "completed"]} | hook,
        headers=ASYNC,
    )
    painted = client.post(
        "/v1/stylize",
        files=[("content", corpus.solid_png((0, 0, 0))), ("style", corpus.solid_png((9, 9, 9)))],
        data={"webhook_events": " progress ,completed"} | hook,
        headers=ASYNC,
    )
    assert made.status_code == painted.status_code == 202, painted.text
    recorded = [
        client.get(f"/v1/jobs/{response.json()['id']}").json()["webhook"]["events"]
        for response in (made, painted)
    ]
    assert recorded == [["completed", "progress"]] * 2
    receiver.close()


def test_the_webhook_policy_is_built_once_from_the_settings(client_factory):
    """The policy checked when a request arrives is the one the dispatcher delivers by."""
    from service.app import webhook_settings

    client = _hooked(client_factory, webhook_allowed_hosts=["a.example", "*.b.example"])
    settings = client.app.state.settings
    policy = WebhookPolicy.of(settings)
    assert policy == WebhookPolicy(("a.example", "*.b.example"), allow_private=True)
    assert webhook_settings(settings).policy == policy


@pytest.mark.parametrize(
    ("url", "overrides", "reason"),
    [
        (
            "http://10.1.2.3/hook",
            {"webhook_allowed_hosts": ["10.1.2.3"], "webhook_allow_private_addresses": False},
            "private",
        ),
        ("http://127.0.0.1/hook", {"webhook_allow_private_addresses": False}, "private"),
        ("http://example.com/hook", {}, "not allowed"),
        ("ftp://127.0.0.1/hook", {}, "http or https"),
        ("http://user:pw@127.0.0.1/hook", {}, "credentials"),
    ],
)
def test_webhook_targets_are_checked_at_submit(client_factory, url, overrides, reason):
    client = _hooked(client_factory, **overrides)
    response = client.post("/v1/generate", json={"prompt": "a", "webhook": url}, headers=ASYNC)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "webhook_not_allowed"
    assert reason in response.json()["error"]["message"]


def test_webhooks_are_refused_until_an_operator_allows_hosts(client):
    response = client.post(
        "/v1/generate", json={"prompt": "a", "webhook": "http://127.0.0.1/x"}, headers=ASYNC
    )
    assert response.status_code == 422 and response.json()["error"]["code"] == "webhook_not_allowed"


def test_a_redirect_is_not_followed(client_factory):
    elsewhere = Receiver([])
    receiver = Receiver([302, 302], redirect_to=f"{elsewhere.url}/stolen")
    client = _hooked(client_factory, webhook_max_attempts=2)
    job = client.post(
        "/v1/generate", json={"prompt": "a", "webhook": receiver.url}, headers=ASYNC
    ).json()
    assert receiver.wait_for(2)
    wait_until(lambda: client.get(f"/v1/jobs/{job['id']}").json()["webhook"].get("gave_up"))
    record = client.get(f"/v1/jobs/{job['id']}").json()["webhook"]
    assert elsewhere.received == []
    assert record["last_status"] == 302 and "redirects are not followed" in record["last_error"]
    receiver.close()
    elsewhere.close()


def test_a_name_that_rebinds_to_loopback_is_refused_at_delivery():
    """The name passed the check at submit (an allowed host, a public address then); at
    delivery it resolves to 127.0.0.1, which private-address rules refuse, and nothing
    is sent there."""
    receiver = Receiver([])
    policy = WebhookPolicy(("hooks.example",), allow_private=False)

    async def rebound(host, port):
        return ["127.0.0.1"]

    async def public(host, port):
        return ["93.184.216.34"]

    class Store:
        updates: list = []

        async def now(self):
            return 0.0

        async def update_webhook(self, job_id, webhook, due_at, *, lease):
            self.updates.append((webhook, due_at))

    async def scenario():
        assert (await check_target("http://hooks.example/x", policy, public)).addresses
        with pytest.raises(WebhookRefused):
            await check_target("http://hooks.example/x", policy, rebound)
        dispatcher = WebhookDispatcher(
            Store(), WebhookSettings(policy, SECRET, max_attempts=1), resolver=rebound
        )
        record = JobRecord(
            id="j", kind="generate", model="dit", owner="a", state="succeeded",
            finished_at=1.0, webhook={"url": f"http://hooks.example:{receiver.url.rsplit(':', 1)[1]}/", "events": ["completed"]},
        )  # fmt: skip
        await dispatcher.deliver(Delivery(record, lease=1.0))

    asyncio.run(scenario())
    receiver.close()
    assert receiver.received == []
    ((webhook, due),) = Store.updates
    assert "refused" in webhook["last_error"] and "127.0.0.1" in webhook["last_error"]
    assert due is None and webhook["gave_up"]


def test_ownership_holds_across_two_replicas_on_redis(client_factory, keys, redis_server):
    file, tokens = keys
    prefix = f"own-{uuid.uuid4().hex[:8]}:"
    shared = {"api_keys_file": file.path, "redis_url": redis_server.url, "redis_prefix": prefix}
    a, b = client_factory(**shared), client_factory(**shared)
    alice, bob = _bearer(tokens["alice"]), _bearer(tokens["bob"])
    job = a.post("/v1/generate", json={"prompt": "a"}, headers={**ASYNC, **alice}).json()
    assert _events(b, job["id"], alice)[-1] == "done"  # followed on the other replica
    assert b.get(f"/v1/jobs/{job['id']}", headers=alice).json()["state"] == "succeeded"
    assert b.get(f"/v1/jobs/{job['id']}", headers=bob).status_code == 404
    assert b.delete(f"/v1/jobs/{job['id']}", headers=bob).status_code == 404
    assert [j["id"] for j in b.get("/v1/jobs", headers=alice).json()["jobs"]] == [job["id"]]

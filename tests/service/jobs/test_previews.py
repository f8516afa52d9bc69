"""Live previews in a job's event stream, the job list's pages, a result's thumbnail and
the limits the page reads (fake models).

The event streams are read from a real uvicorn as they come (the test client buffers a
whole answer), so a test can hold the fake model between two steps until it has seen a
preview, and only then let the job finish.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import corpus
import httpx
import pytest
import torch
from api_headers import ASYNC
from PIL import Image
from service_fakes import Fakes, make_settings, served, wait_until

from service.app import create_app
from service.execution.previews import Previews, preview_jpeg
from service.jobs.previews import pack_preview, preview_event, unpack_preview

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server(fakes: Fakes) -> Iterator[str]:
    app = create_app(make_settings(), model_entries=fakes.entries())
    with served(app) as url:
        yield url


def _submit(
    url: str, kind: str, *, previews: str | None, headers=ASYNC, **fields
) -> httpx.Response:
    if kind == "generate":
        body: dict[str, Any] = {"prompt": "a red circle", "seed": 3, **fields}
        if previews is not None:
            body["previews"] = json.loads(previews)
        return httpx.post(f"{url}/v1/generate", json=body, headers=headers, timeout=30)
    data = {k: str(v) for k, v in fields.items()}
    if previews is not None:
        data["previews"] = previews
    files = [
        ("content", ("photo.png", corpus.png(96, 64))),
        ("style", ("s.png", corpus.png(32, 32))),
    ]
    return httpx.post(f"{url}/v1/stylize", files=files, data=data, headers=headers, timeout=30)


def _follow(
    url: str, job_id: str, on_event: Callable[[str, dict[str, Any]], None] = lambda e, d: None
) -> list[tuple[str, dict[str, Any]]]:
    """Every event of the job's stream, as it comes (``on_event`` hears each at once)."""
    events = []
    with httpx.stream("GET", f"{url}/v1/jobs/{job_id}/events", timeout=30) as stream:
        event = None
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event is not None:
                data = json.loads(line.split(":", 1)[1])
                events.append((event, data))
                on_event(event, data)
                if event in ("done", "gone"):
                    break
    return events


def _model(fakes: Fakes, kind: str) -> Any:
    return fakes.dit["cpu"] if kind == "generate" else fakes.adain["cpu"]


# --------------------------------------------------------------------------- previews
@pytest.mark.parametrize("kind", ["stylize", "generate"])
def test_a_job_sent_with_previews_shows_one_before_its_result(server, fakes, kind):
    """The model is held after its first step until the stream has shown a preview."""
    model = _model(fakes, kind)
    model.step_gate = threading.Semaphore(1)  # the first step runs; the second waits
    accepted = _submit(server, kind, previews="true")
    assert accepted.status_code == 202, accepted.text
    job = accepted.json()
    assert job["parameters"]["previews"] is True

    def release_after_a_preview(event: str, data: dict[str, Any]) -> None:
        if event == "preview":
            model.step_gate.release(100)

    events = _follow(server, job["id"], release_after_a_preview)
    names = [event for event, _ in events]
    assert "preview" in names and names[-1] == "done"
    assert names.index("preview") < names.index("done")
    preview = dict(events)["preview"]
    assert preview["media_type"] == "image/jpeg"
    assert 1 <= preview["step"] < preview["total"]
    image = Image.open(io.BytesIO(base64.b64decode(preview["image"])))
    assert image.format == "JPEG" and image.size == (preview["width"], preview["height"])
    assert max(image.size) <= 256
    if kind == "stylize":  # the fake shows the photo, 96 x 64: as it is
        assert image.size == (96, 64)
    else:  # the fake's 8 px image, enlarged by a whole factor (its pixels survive JPEG)
        assert image.size == (128, 128)
    assert dict(events)["done"]["state"] == "succeeded"
    assert model.hooked == [True]


@pytest.mark.parametrize("kind", ["stylize", "generate"])
def test_a_job_without_previews_installs_no_hook_and_writes_none(server, fakes, kind):
    model = _model(fakes, kind)
    model.step_delay_s = 0.05
    job = _submit(server, kind, previews=None).json()
    events = _follow(server, job["id"])
    assert "preview" not in [event for event, _ in events]
    assert events[-1][1]["state"] == "succeeded"
    assert "previews" not in job["parameters"]  # the job's JSON as before
    assert model.hooked == [False] and model.shown == 0  # the model was shown nothing
    # previews=false is the same as none
    job = _submit(server, kind, previews="false").json()
    assert "preview" not in [event for event, _ in _follow(server, job["id"])]
    assert model.hooked == [False, False]


def test_previews_on_a_request_answered_at_once_install_nothing(server, fakes):
    """Work answered at once has no event stream: its model is shown nothing."""
    response = _submit(server, "stylize", previews="true", headers={})
    assert response.status_code == 200 and response.headers["content-type"] == "image/png"
    assert fakes.adain["cpu"].hooked == [False]


def test_previews_are_at_most_two_a_second(server, fakes):
    model = fakes.dit["cpu"]
    model.step_delay_s = 0.05
    started = time.monotonic()
    job = _submit(server, "generate", previews="true", steps=40).json()
    events = _follow(server, job["id"])
    seconds = time.monotonic() - started
    previews = [data for event, data in events if event == "preview"]
    assert 2 <= len(previews) <= 2 * seconds + 1, (len(previews), seconds)
    steps = [data["step"] for data in previews]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert model.shown <= 2 * seconds + 1  # pictures not taken were never made


@pytest.mark.parametrize(
    ("kind", "value"), [("stylize", "maybe"), ("generate", '"yes"'), ("generate", "1")]
)
def test_a_bad_previews_value_is_refused_naming_the_field(server, kind, value):
    response = _submit(server, kind, previews=value)
    assert response.status_code == 422
    assert response.json()["error"]["message"].startswith("previews:")


def test_previews_are_not_part_of_the_idempotency_fingerprint(server, fakes):
    first = _submit(server, "generate", previews="true", headers={**ASYNC, "Idempotency-Key": "k1"})
    again = _submit(
        server, "generate", previews="false", headers={**ASYNC, "Idempotency-Key": "k1"}
    )
    assert first.status_code == 202 and again.status_code == 202
    assert again.json()["id"] == first.json()["id"]


def test_previews_take_one_picture_per_interval_and_none_of_the_last_step():
    now = [0.0]
    published: list[bytes] = []
    previews = Previews(published.append, interval_s=0.5, clock=lambda: now[0])
    asked = []

    def picture() -> torch.Tensor:
        asked.append(now[0])
        return torch.rand(3, 40, 30)

    offer = previews.watcher(0)
    assert offer is not None and previews.watcher(1) is None  # the first image's only
    for tick in range(21):  # a step every 0.1 s for 2 s
        now[0] = tick / 10
        offer(tick + 1, 25, picture)
    assert asked == [0.0, 0.5, 1.0, 1.5, 2.0]
    now[0] = 10.0
    offer(25, 25, picture)  # the last step: the result itself comes next
    assert len(published) == previews.taken == 5
    data, fields = unpack_preview(published[0])
    assert fields == {
        "media_type": "image/jpeg",
        "width": 90,
        "height": 120,
        "step": 1,
        "total": 25,
    }
    assert json.loads(preview_event(published[0]))["image"] == base64.b64encode(data).decode()


def test_a_preview_that_fails_never_fails_the_job():
    previews = Previews(lambda blob: None)
    offer = previews.watcher(0)
    assert offer is not None

    def broken() -> torch.Tensor:
        raise RuntimeError("no picture")

    offer(1, 4, broken)  # logged; no more previews of this job
    offer(2, 4, lambda: torch.rand(3, 8, 8))
    assert previews.taken == 0


@pytest.mark.parametrize(
    ("size", "expected"),
    [((3, 1024, 768), (192, 256)), ((3, 8, 8), (128, 128)), ((3, 200, 100), (100, 200))],
)
def test_a_preview_is_small(size, expected):
    data, width, height = preview_jpeg(torch.rand(size))
    image = Image.open(io.BytesIO(data))
    assert image.format == "JPEG" and image.size == (width, height) == expected
    assert len(data) < 40_000


def test_a_packed_preview_round_trips():
    blob = pack_preview(b"jpeg", 4, 3, 2, 5)
    assert unpack_preview(blob) == (
        b"jpeg",
        {"media_type": "image/jpeg", "width": 4, "height": 3, "step": 2, "total": 5},
    )


# ------------------------------------------------------------------------------ paging
def test_the_job_list_comes_in_pages(client):
    ids = []
    for seed in range(5):
        response = client.post(
            "/v1/generate", json={"prompt": "a circle", "seed": seed}, headers=ASYNC
        )
        ids.append(response.json()["id"])
    newest_first = list(reversed(ids))
    everything = client.get("/v1/jobs").json()
    assert [job["id"] for job in everything["jobs"]] == newest_first
    assert everything["next_offset"] is None
    seen, offset = [], 0
    pages = 0
    while offset is not None:
        page = client.get("/v1/jobs", params={"limit": 2, "offset": offset}).json()
        assert len(page["jobs"]) <= 2
        seen += [job["id"] for job in page["jobs"]]
        offset = page["next_offset"]
        pages += 1
    assert seen == newest_first and pages == 3
    assert client.get("/v1/jobs", params={"offset": 7}).json() == {"jobs": [], "next_offset": None}
    for bad in ({"offset": -1}, {"offset": 1001}, {"limit": 0}):
        response = client.get("/v1/jobs", params=bad)
        assert response.status_code == 422
        assert response.json()["error"]["message"].split(":")[0] in ("offset", "limit")


# ------------------------------------------------------------------------- thumbnails
def _finished(client, job_id: str) -> dict:
    wait_until(
        lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] not in ("queued", "running")
    )
    return client.get(f"/v1/jobs/{job_id}").json()


def test_a_thumbnail_is_a_small_jpeg_of_the_result(client):
    files = [
        ("content", ("photo.png", corpus.png(600, 400))),
        ("style", ("s.png", corpus.png(32, 32))),
    ]
    job = client.post("/v1/stylize", files=files, data={"size": "600"}, headers=ASYNC).json()
    assert _finished(client, job["id"])["state"] == "succeeded"
    for size, expected in ((None, (256, 171)), (100, (100, 67)), (16, (16, 11))):
        params = {} if size is None else {"size": size}
        answer = client.get(f"/v1/jobs/{job['id']}/thumbnail", params=params)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "image/jpeg"
        assert "max-age" in answer.headers["cache-control"]
        assert Image.open(io.BytesIO(answer.content)).size == expected
    # made once per size: the same bytes again, from the cache
    again = client.get(f"/v1/jobs/{job['id']}/thumbnail")
    assert again.content == client.get(f"/v1/jobs/{job['id']}/thumbnail").content
    assert client.app.state.job_thumbnails.made == 3
    for bad in (15, 513):
        answer = client.get(f"/v1/jobs/{job['id']}/thumbnail", params={"size": bad})
        assert answer.status_code == 422 and answer.json()["error"]["message"].startswith("size:")


def test_a_small_result_is_its_own_thumbnail(client):
    job = client.post("/v1/generate", json={"prompt": "a circle", "num_images": 2}, headers=ASYNC)
    job_id = job.json()["id"]
    assert _finished(client, job_id)["state"] == "succeeded"
    for index in (0, 1):
        thumbnail = client.get(f"/v1/jobs/{job_id}/thumbnail", params={"index": index})
        result = client.get(f"/v1/jobs/{job_id}/result", params={"index": index})
        assert thumbnail.headers["content-type"] == "image/png"
        assert thumbnail.content == result.content  # 8 x 8: as it is
    missing = client.get(f"/v1/jobs/{job_id}/thumbnail", params={"index": 2})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "no_thumbnail"


def test_no_thumbnail_of_an_unknown_or_unfinished_job(client, fakes):
    assert client.get("/v1/jobs/nope/thumbnail").status_code == 404
    model = fakes.dit["cpu"]
    model.step_gate = threading.Semaphore(0)
    job_id = client.post("/v1/generate", json={"prompt": "a circle"}, headers=ASYNC).json()["id"]
    answer = client.get(f"/v1/jobs/{job_id}/thumbnail")
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "job_not_succeeded"
    model.step_gate.release(100)
    assert _finished(client, job_id)["state"] == "succeeded"
    assert client.get(f"/v1/jobs/{job_id}/thumbnail").status_code == 200


def test_no_thumbnail_of_a_video(client_factory):
    from tests.clips import CLIPS, make_clip

    client = client_factory()
    files = [
        ("content", ("clip.mp4", make_clip(*CLIPS["mp4"], frames=4), "application/octet-stream")),
        ("style", ("s.png", corpus.png(32, 32))),
    ]
    job = client.post("/v1/stylize", files=files, headers=ASYNC).json()
    assert _finished(client, job["id"])["state"] == "succeeded"
    answer = client.get(f"/v1/jobs/{job['id']}/thumbnail")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "no_thumbnail"


# ---------------------------------------------------------------------------- limits
def test_the_limits_say_the_generate_budget_and_the_largest_size_with_masks(client_factory):
    limits = client_factory(max_image_steps=123).get("/v1/limits").json()
    assert limits["generate"] == {"max_image_steps": 123, "max_images": 8}
    assert limits["stylize"]["max_mask_size"] == 1024
    assert set(limits["stylize"]) >= {"max_side", "print_size_above", "max_upload_bytes"}
    small = client_factory(max_side=640).get("/v1/limits").json()
    assert small["stylize"]["max_mask_size"] == 640
    # the stylize route refuses masks above that size
    files = [
        ("content", ("p.png", corpus.png(64, 64))),
        ("style", ("s.png", corpus.png(32, 32))),
        ("mask", ("m.png", corpus.png(64, 64))),
    ]
    client = client_factory(max_side=4096)
    assert client.get("/v1/limits").json()["stylize"]["max_mask_size"] == 1024
    refused = client.post("/v1/stylize", files=files, data={"size": "1025"}, headers=ASYNC)
    assert refused.status_code == 422 and "1024" in refused.json()["error"]["message"]


@pytest.mark.weights
def test_the_real_dit_shows_its_estimate_while_it_samples(real_models_url):
    """The real pipeline's sampler hands its estimate through the batch's control: a
    long enough job (200 steps) shows previews, 32 px enlarged to 128, before its done."""
    response = httpx.post(
        f"{real_models_url}/v1/generate",
        json={"prompt": "a red circle", "steps": 200, "seed": 1, "previews": True},
        headers=ASYNC,
        timeout=30,
    )
    assert response.status_code == 202, response.text
    events = _follow(real_models_url, response.json()["id"])
    names = [event for event, _ in events]
    assert names[-1] == "done" and events[-1][1]["state"] == "succeeded"
    assert "preview" in names, names
    preview = dict(events)["preview"]
    image = Image.open(io.BytesIO(base64.b64decode(preview["image"])))
    assert image.size == (128, 128) and preview["total"] == 200

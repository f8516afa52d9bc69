"""The weights manifest: shipped entries, resolution, verification and atomic fetching."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from models.hub import (
    DEFAULT_MANIFEST,
    ChecksumError,
    Manifest,
    WeightsNotFoundError,
    fetch,
    resolve,
    sha256_of,
    status,
)

# sha256 of the shared files as published in ../shared/weights/README.md.
SHARED_SHA256 = {
    "vgg19-normalised/feature_invertor_conv1_1.pth": "fb48663414644122e4311305907d3fbfa3d51cba1a8609b0179e3a38ba4fa025",
    "vgg19-normalised/feature_invertor_conv2_1.pth": "146e53c444bab64cbc118e6c733409dbedfee202e0f0cb9095f4284d4deeef8c",
    "vgg19-normalised/feature_invertor_conv3_1.pth": "899eb82c2ee7b4214c57ca3655c50fbed652c63ef695f36ed035368c03bdf7d7",
    "vgg19-normalised/vgg_normalised_conv1_1.pth": "1bc4ad2ae2a3e5e5f86a9c8d4cb5b78d9a94a07371334a3952d8dceaa4a55aa6",
    "vgg19-normalised/vgg_normalised_conv2_1.pth": "0d345a57453279ba914f991edce6ac99a52f1d30df387721c603e423386b1cc9",
    "vgg19-normalised/vgg_normalised_conv3_1.pth": "4ffff49ad5cdc3337374b947918f35f903fcb0898b0b5eebfcbd601b99fc3929",
}


def test_shipped_manifest_lists_every_shared_file_with_provenance():
    manifest = Manifest.load(DEFAULT_MANIFEST)
    files = {item.path: item for checkpoint in manifest for item in checkpoint.files}
    for path, digest in SHARED_SHA256.items():
        assert files[path].sha256 == digest
        assert files[path].url.startswith("https://")
        assert files[path].size > 0
    for checkpoint in manifest:
        assert checkpoint.license and checkpoint.source
    assert {"adain/vgg_normalised.pth", "adain/decoder.pth"} <= set(files)


@pytest.mark.weights
def test_shared_files_verify(shared_weights_dir):
    rows = status(Manifest.load(), [shared_weights_dir], check=True)
    checked = {row.file.path: row.sha256_ok for row in rows if row.file.path in SHARED_SHA256}
    assert checked == dict.fromkeys(SHARED_SHA256, True)


def _manifest(tmp_path: Path, payload: bytes, *, url: str, sha256: str | None) -> Manifest:
    data = {
        "checkpoints": [
            {
                "name": "toy",
                "license": "CC0",
                "source": "test",
                "files": [
                    {"path": "toy/model.pth", "sha256": sha256, "size": len(payload), "url": url}
                ],
            }
        ]
    }
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(data))
    return Manifest.load(path)


def test_resolve_searches_in_order_and_explains_misses(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    (second / "toy").mkdir(parents=True)
    (second / "toy" / "model.pth").write_bytes(b"x")
    manifest = _manifest(tmp_path, b"x", url="https://example.invalid/m", sha256=None)
    assert resolve("toy/model.pth", [first, second], manifest) == second / "toy" / "model.pth"
    (first / "toy").mkdir(parents=True)
    (first / "toy" / "model.pth").write_bytes(b"y")
    assert resolve("toy/model.pth", [first, second], manifest) == first / "toy" / "model.pth"
    with pytest.raises(WeightsNotFoundError) as info:
        resolve("toy/other.pth", [first, second], manifest)
    message = str(info.value)
    assert "toy/other.pth" in message and str(first) in message and str(second) in message
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(WeightsNotFoundError, match="atelier weights fetch toy"):
        resolve("toy/model.pth", [tmp_path / "empty"], manifest)


def test_fetch_downloads_and_verifies(tmp_path, http_root):
    root, base = http_root
    payload = bytes(range(256)) * 50
    (root / "model.pth").write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    manifest = _manifest(tmp_path, payload, url=f"{base}/model.pth", sha256=digest)
    destination = tmp_path / "weights"
    paths = fetch(manifest, "toy", destination, progress=False)
    assert paths == [destination / "toy" / "model.pth"]
    assert paths[0].read_bytes() == payload
    assert sha256_of(paths[0]) == digest
    assert sorted(p.name for p in (destination / "toy").iterdir()) == ["model.pth"]
    # present and valid: fetching again downloads nothing (the server no longer has it)
    (root / "model.pth").unlink()
    assert fetch(manifest, "toy", destination, progress=False) == paths


def test_fetch_with_wrong_sha256_leaves_no_file(tmp_path, http_root):
    root, base = http_root
    (root / "model.pth").write_bytes(b"tampered bytes")
    manifest = _manifest(tmp_path, b"", url=f"{base}/model.pth", sha256="0" * 64)
    destination = tmp_path / "weights"
    with pytest.raises(ChecksumError, match="sha256 mismatch"):
        fetch(manifest, "toy", destination, progress=False)
    leftovers = list(destination.rglob("*"))
    assert [p for p in leftovers if p.is_file()] == []


def test_failed_fetch_keeps_the_existing_file(tmp_path, http_root):
    root, base = http_root
    (root / "model.pth").write_bytes(b"new but wrong")
    manifest = _manifest(tmp_path, b"", url=f"{base}/model.pth", sha256="1" * 64)
    destination = tmp_path / "weights"
    (destination / "toy").mkdir(parents=True)
    (destination / "toy" / "model.pth").write_bytes(b"old")
    with pytest.raises(ChecksumError):
        fetch(manifest, "toy", destination, progress=False)
    assert (destination / "toy" / "model.pth").read_bytes() == b"old"
    assert sorted(p.name for p in (destination / "toy").iterdir()) == ["model.pth"]


def test_fetch_refuses_unpinned_files_and_unknown_names(tmp_path, http_root):
    root, base = http_root
    (root / "model.pth").write_bytes(b"data")
    manifest = _manifest(tmp_path, b"data", url=f"{base}/model.pth", sha256=None)
    with pytest.raises(ValueError, match="no sha256"):
        fetch(manifest, "toy", tmp_path / "w", progress=False)
    assert not (tmp_path / "w" / "toy" / "model.pth").exists()
    fetched = fetch(manifest, "toy", tmp_path / "w", allow_unpinned=True, progress=False)
    assert fetched[0].read_bytes() == b"data"
    with pytest.raises(KeyError, match="toy"):
        manifest.get("nope")


def test_checkpoints_shipped_in_the_repository_match_the_manifest():
    """Files without a download URL live in the repo's weights/: present, same size and sha256."""
    shipped = [item for checkpoint in Manifest.load() for item in checkpoint.files if not item.url]
    assert shipped, "the manifest lists no checkpoint trained by this project"
    for item in shipped:
        path = DEFAULT_MANIFEST.parent / item.path
        assert path.is_file(), f"{item.path} is in the manifest but not in weights/"
        assert path.stat().st_size == item.size
        assert hashlib.sha256(path.read_bytes()).hexdigest() == item.sha256

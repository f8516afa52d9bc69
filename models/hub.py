"""The weights manifest: which checkpoints exist, where they come from, where they are.

``weights/manifest.json`` lists every known checkpoint as a named group of files, each
with its path relative to a weights folder, sha256, size and download URL, plus the
group's licence and upstream source. This module reads it, finds files across a search
path of folders, verifies them and downloads missing ones (sha256-checked, written to
a temporary file and moved into place with ``os.replace`` so a failed download never
leaves a partial file behind).

Folders are always passed in: the service decides them from its settings.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import tempfile
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

#: The manifest shipped with the repository.
DEFAULT_MANIFEST = Path(__file__).resolve().parent.parent / "weights" / "manifest.json"

_CHUNK = 1 << 20


class WeightsNotFoundError(FileNotFoundError):
    """A checkpoint file is in none of the searched folders."""

    def __init__(self, relative_path: str, searched: Sequence[Path], checkpoint: str | None):
        self.relative_path = relative_path
        self.searched = [Path(folder) for folder in searched]
        self.checkpoint = checkpoint
        where = ", ".join(str(folder) for folder in self.searched) or "(no folders)"
        how = (
            f"run `atelier weights fetch {checkpoint}`"
            if checkpoint
            else "put the file in one of these folders"
        )
        super().__init__(
            f"missing weights file {relative_path!r}: looked in {where}; "
            f"{how} (or set ATELIER_WEIGHTS_DIR to a folder holding it)"
        )


class ChecksumError(ValueError):
    """A file's sha256 differs from the manifest's."""


@dataclass(frozen=True)
class WeightFile:
    """One file of a checkpoint.

    Attributes:
        path: location relative to a weights folder, e.g.
            ``"vgg19-normalised/vgg_normalised_conv3_1.pth"``.
        sha256: hex digest, or ``None`` when the manifest cannot pin it.
        size: bytes, or ``None`` when unknown.
        url: where ``fetch`` downloads it from, or ``None`` for files shipped in the repo.
    """

    path: str
    sha256: str | None
    size: int | None
    url: str | None


@dataclass(frozen=True)
class Checkpoint:
    """A named group of files with one licence and one upstream source."""

    name: str
    description: str
    files: tuple[WeightFile, ...]
    license: str
    source: str


@dataclass(frozen=True)
class FileStatus:
    """Where a file was found (``None`` if nowhere) and whether its sha256 matches."""

    checkpoint: str
    file: WeightFile
    location: Path | None
    sha256_ok: bool | None  # None: not found, or nothing to compare against


class Manifest:
    """The parsed manifest: checkpoints by name, and lookups by relative file path."""

    def __init__(self, checkpoints: Sequence[Checkpoint]) -> None:
        self.checkpoints = {checkpoint.name: checkpoint for checkpoint in checkpoints}
        if len(self.checkpoints) != len(checkpoints):
            raise ValueError("manifest has duplicate checkpoint names")

    @classmethod
    def load(cls, path: str | Path = DEFAULT_MANIFEST) -> Manifest:
        """Read and validate a manifest JSON file."""
        data = json.loads(Path(path).read_text())
        try:
            checkpoints = [
                Checkpoint(
                    name=entry["name"],
                    description=entry.get("description", ""),
                    license=entry["license"],
                    source=entry["source"],
                    files=tuple(
                        WeightFile(
                            path=item["path"],
                            sha256=item.get("sha256"),
                            size=item.get("size"),
                            url=item.get("url"),
                        )
                        for item in entry["files"]
                    ),
                )
                for entry in data["checkpoints"]
            ]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed manifest {path}: {exc!r}") from exc
        return cls(checkpoints)

    def __iter__(self) -> Iterator[Checkpoint]:
        return iter(self.checkpoints.values())

    def get(self, name: str) -> Checkpoint:
        """The checkpoint called ``name``; ``KeyError`` lists the known names."""
        if name not in self.checkpoints:
            raise KeyError(f"unknown checkpoint {name!r}; known: {sorted(self.checkpoints)}")
        return self.checkpoints[name]

    def owner_of(self, relative_path: str) -> Checkpoint | None:
        """The checkpoint that lists ``relative_path``, if any."""
        for checkpoint in self:
            if any(item.path == relative_path for item in checkpoint.files):
                return checkpoint
        return None


def sha256_of(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def find_file(relative_path: str, search_path: Sequence[Path]) -> Path | None:
    """The first ``folder / relative_path`` that exists, in search-path order."""
    for folder in search_path:
        candidate = Path(folder) / relative_path
        if candidate.is_file():
            return candidate
    return None


def resolve(
    relative_path: str, search_path: Sequence[Path], manifest: Manifest | None = None
) -> Path:
    """Locate a weights file or raise :class:`WeightsNotFoundError` naming what to fetch."""
    found = find_file(relative_path, search_path)
    if found is None:
        owner = manifest.owner_of(relative_path) if manifest else None
        raise WeightsNotFoundError(relative_path, search_path, owner.name if owner else None)
    return found


def status(manifest: Manifest, search_path: Sequence[Path], *, check: bool) -> list[FileStatus]:
    """Every manifest file's location and, with ``check``, whether its sha256 matches."""
    rows = []
    for checkpoint in manifest:
        for item in checkpoint.files:
            location = find_file(item.path, search_path)
            ok = None
            if check and location is not None and item.sha256:
                ok = sha256_of(location) == item.sha256
            rows.append(FileStatus(checkpoint.name, item, location, ok))
    return rows


def _open_url(url: str, timeout: float) -> http.client.HTTPResponse:
    # urlopen is typed as returning Any; for an http(s) URL it is an HTTPResponse
    response: http.client.HTTPResponse = urllib.request.urlopen(  # noqa: S310 (http(s) only, see fetch)
        url, timeout=timeout
    )
    return response


def download(
    item: WeightFile,
    destination: Path,
    *,
    allow_unpinned: bool = False,
    timeout: float = 60.0,
    progress: bool = True,
) -> Path:
    """Download one file to ``destination / item.path``, sha256-checked and atomic.

    The bytes go to a temporary file in the destination folder; only when the digest
    matches is it moved into place with ``os.replace``. On any failure the temporary
    file is removed and an existing file at the target is left untouched.

    Raises:
        ValueError: no URL, a non-http(s) URL, or no sha256 without ``allow_unpinned``.
        ChecksumError: the downloaded bytes do not match the manifest's sha256.
    """
    if not item.url:
        raise ValueError(f"{item.path} has no download URL (it ships with the repository)")
    if not item.url.startswith(("http://", "https://")):
        raise ValueError(f"refusing to download {item.path} from non-http(s) URL {item.url!r}")
    if item.sha256 is None and not allow_unpinned:
        raise ValueError(
            f"{item.path} has no sha256 in the manifest; pass allow_unpinned to fetch it anyway"
        )
    target = Path(destination) / item.path
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        digest = hashlib.sha256()
        with os.fdopen(handle, "wb") as out, _open_url(item.url, timeout) as response:
            total = item.size or int(response.headers.get("Content-Length") or 0) or None
            with tqdm(
                total=total, unit="B", unit_scale=True, desc=item.path, disable=not progress
            ) as bar:
                for chunk in iter(lambda: response.read(_CHUNK), b""):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
        if item.sha256 is not None and digest.hexdigest() != item.sha256:
            raise ChecksumError(
                f"sha256 mismatch for {item.path}: expected {item.sha256}, "
                f"downloaded {digest.hexdigest()} from {item.url}"
            )
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def fetch(
    manifest: Manifest,
    name: str,
    destination: Path,
    *,
    search_path: Sequence[Path] = (),
    allow_unpinned: bool = False,
    progress: bool = True,
) -> list[Path]:
    """Make every file of checkpoint ``name`` present: reuse verified copies, download the rest.

    Args:
        manifest: the manifest.
        name: a checkpoint name.
        destination: folder the downloads go to (usually the first of the search path).
        search_path: folders where an existing, sha256-valid copy counts as present.
        allow_unpinned: download files the manifest has no sha256 for.
        progress: show a tqdm bar per file.

    Returns:
        The path of each file of the checkpoint.
    """
    paths = []
    for item in manifest.get(name).files:
        existing = find_file(item.path, [destination, *search_path])
        if existing is not None and (item.sha256 is None or sha256_of(existing) == item.sha256):
            paths.append(existing)
            continue
        paths.append(download(item, destination, allow_unpinned=allow_unpinned, progress=progress))
    return paths

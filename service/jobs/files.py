"""Big job inputs and results as files beside the job database, not inside it.

A blob of at least ``FILE_MIN_BYTES`` is written to its own file in one folder: first
to a temporary name, flushed to disk, then renamed into place (a reader never sees half
a file, a crash leaves at most a temporary file that the next start removes). The
database keeps the file's name and its SHA-256; a read checks the bytes against it, so
a damaged file reads as missing, never as another result. A name is the job's id and a
random part, so two workers that finish the same job (a rerun after a lost lease) never
write one file.

A full volume (``ENOSPC``, ``EDQUOT``) is ``StoreFull``: the caller fails the write
as it does when the database itself is full.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from service.errors import StoreFull, StoreUnavailable

logger = logging.getLogger("atelier.jobs")

#: Blobs this large or larger are files; smaller ones stay in the database's rows.
FILE_MIN_BYTES = 256 * 1024

_TEMPORARY = ".partial"


@dataclass(frozen=True)
class BlobFile:
    """Where a blob lives: its file's ``name`` in the folder, and the SHA-256 (hex) of
    its bytes."""

    name: str
    checksum: str


class BlobFiles:
    """The folder ``root`` of a store's file-held blobs (created when missing)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def write(self, job_id: str, kind: str, data: bytes) -> BlobFile:
        """Write ``data`` as a new file (atomically: written whole, flushed, renamed).

        Raises:
            StoreFull: the volume has no room (nothing is left behind).
            StoreUnavailable: the folder cannot be written otherwise.
        """
        name = f"{job_id}.{kind}.{uuid.uuid4().hex[:12]}"
        self.root.mkdir(parents=True, exist_ok=True)
        partial = self.root / (name + _TEMPORARY)
        try:
            with open(partial, "xb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, self.root / name)
            self._sync_folder()
        except OSError as exc:
            partial.unlink(missing_ok=True)
            logger.warning("could not write a job's file", extra={"error": str(exc)})
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StoreFull(
                    "the job files' disk is full: nothing new can be stored until "
                    "finished jobs expire or an operator frees space"
                ) from exc
            raise StoreUnavailable("the job files cannot be written right now") from exc
        return BlobFile(name, hashlib.sha256(data).hexdigest())

    def read(self, blob: BlobFile) -> bytes | None:
        """The file's bytes; None when it is gone or does not match its checksum."""
        try:
            data = (self.root / blob.name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable("the job files cannot be read right now") from exc
        if hashlib.sha256(data).hexdigest() != blob.checksum:
            logger.error("a job's file does not match its checksum", extra={"file": blob.name})
            return None
        return data

    def delete(self, names: list[str]) -> None:
        for name in names:
            (self.root / name).unlink(missing_ok=True)

    def sweep(self, kept: set[str], *, older_than_s: float) -> int:
        """Delete the files no row names (a write whose transaction never committed, a
        crash between the two) last written over ``older_than_s`` ago; returns how many."""
        if not self.root.is_dir():
            return 0
        limit = time.time() - older_than_s
        orphans = [
            entry.name
            for entry in self.root.iterdir()
            if entry.name not in kept and entry.stat().st_mtime < limit
        ]
        self.delete(orphans)
        return len(orphans)

    def _sync_folder(self) -> None:
        """The rename itself reaches the disk (a crash after the commit keeps the file)."""
        descriptor = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

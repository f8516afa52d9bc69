"""Big blobs as files in one folder: beside the SQLite job database by default, or on a
volume every replica of one host (or a shared file system) mounts.

A blob is written to a temporary name, flushed to disk, then renamed into place (a
reader never sees half a file; a crash leaves at most a temporary file, which a sweep
removes). A full volume (``ENOSPC``, ``EDQUOT``) is ``StoreFull``; any other error of
the file system is ``StoreUnavailable``.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from service.errors import StoreFull, StoreUnavailable
from service.jobs.blobs import BlobRef, BlobStore, blob_name, checksum

logger = logging.getLogger("atelier.jobs")

_TEMPORARY = ".partial"


class VolumeBlobs(BlobStore):
    """The folder ``root`` of the blobs (created when missing)."""

    where = "the job files' disk"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def write(self, job_id: str, kind: str, pieces: Sequence[bytes]) -> BlobRef:
        name = blob_name(job_id, kind)
        partial = self.root / (name + _TEMPORARY)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(partial, "xb") as file:
                for piece in pieces:
                    file.write(piece)
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
        return BlobRef(name, checksum(*pieces), sum(len(piece) for piece in pieces))

    def read(self, ref: BlobRef) -> bytes | None:
        try:
            data = (self.root / ref.name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable("the job files cannot be read right now") from exc
        if checksum(data) != ref.checksum:
            logger.error("a job's file does not match its checksum", extra={"file": ref.name})
            return None
        return data

    def read_range(self, ref: BlobRef, start: int, stop: int) -> bytes | None:
        try:
            with open(self.root / ref.name, "rb") as file:
                file.seek(start)
                return file.read(max(0, stop - start))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable("the job files cannot be read right now") from exc

    def open_file(self, ref: BlobRef) -> IO[bytes] | None:
        try:
            file = open(self.root / ref.name, "rb")  # noqa: SIM115 - the caller closes it
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable("the job files cannot be read right now") from exc
        if hasattr(os, "posix_fadvise"):
            # read ahead now, on this thread: ``sendfile`` then finds the bytes in the page
            # cache instead of waiting for the disk on the event loop
            os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_WILLNEED)
        return file

    def delete(self, names: list[str]) -> None:
        for name in names:
            (self.root / name).unlink(missing_ok=True)

    def sweep(self, kept: set[str], *, older_than_s: float) -> int:
        if not self.root.is_dir():
            return 0
        limit = time.time() - older_than_s
        orphans = []
        for entry in self.root.iterdir():
            try:
                if entry.name not in kept and entry.stat().st_mtime < limit:
                    orphans.append(entry.name)
            except FileNotFoundError:  # deleted meanwhile
                continue
        self.delete(orphans)
        return len(orphans)

    def _sync_folder(self) -> None:
        """The rename itself reaches the disk (a crash after the commit keeps the file)."""
        descriptor = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

"""Big job inputs and results, kept apart from the job database: one interface, two
back ends.

A job store keeps records, leases and small values itself; a blob of at least
``FILE_MIN_BYTES`` goes to a :class:`BlobStore` and the store keeps only its
:class:`BlobRef` (name, SHA-256, size). Back ends:

* :class:`~service.jobs.blobs.volume.VolumeBlobs`: files in one folder (the default: a
  folder beside the SQLite database, or a shared volume);
* :class:`~service.jobs.blobs.s3.S3Blobs`: objects in an S3-compatible bucket (AWS S3,
  MinIO, ...), what several replicas on several hosts share.

Every method blocks (disk or network): a store calls them on a worker thread, never on
the event loop. Errors are the service's own: a full volume or bucket is ``StoreFull``
(507), anything else ``StoreUnavailable`` (503), with a message of ours, never the
library's. A whole read is checked against the checksum (a damaged blob reads as
missing, never as other bytes); a range read (``Range`` downloads) is checked for its
length only, as checking the checksum would need the whole blob.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import IO, Protocol

from service.errors import StoreFull, StoreUnavailable

logger = logging.getLogger("atelier.jobs")

#: Blobs this large or larger go to the blob store; smaller ones stay in the job store.
FILE_MIN_BYTES = 256 * 1024

#: An unnamed blob is left alone this long (another process may be about to commit
#: the record that names it: a commit follows its blob's write at once, within the
#: store's call budget, seconds even for a print's tens of MB). Longer would keep an
#: expired job's blobs on a full volume as long.
WRITE_GRACE_S = 60.0


@dataclass(frozen=True)
class BlobRef:
    """Where a blob lives: its ``name`` in the store, the SHA-256 (hex) of its bytes, and
    its length (``None``: not recorded, as in rows written before it was)."""

    name: str
    checksum: str
    size: int | None = None


def blob_name(job_id: str, kind: str) -> str:
    """A new blob's name: the job's id, its kind (``in``, ``out``), and a random part, so
    that two workers finishing the same job (a rerun after a lost lease) never write one
    blob."""
    return f"{job_id}.{kind}.{uuid.uuid4().hex[:12]}"


def checksum(*pieces: bytes) -> str:
    """The SHA-256 (hex) of the pieces' concatenation, without joining them."""
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
    return digest.hexdigest()


class BlobStore(ABC):
    """Where big blobs live (see the module docstring). Names are :func:`blob_name`'s."""

    #: How the store is named in logs and messages ("the job files' disk", "the bucket").
    where: str

    @abstractmethod
    def write(self, job_id: str, kind: str, pieces: Sequence[bytes]) -> BlobRef:
        """Store the concatenation of ``pieces`` as a new blob, whole or not at all
        (written one piece after another: a big result is never joined in memory).

        Raises:
            StoreFull: no room (nothing is left behind).
            StoreUnavailable: it cannot be written otherwise.
        """

    @abstractmethod
    def read(self, ref: BlobRef) -> bytes | None:
        """The blob's bytes; ``None`` when it is gone or does not match its checksum.

        Raises:
            StoreUnavailable: it cannot be read right now.
        """

    @abstractmethod
    def read_range(self, ref: BlobRef, start: int, stop: int) -> bytes | None:
        """Bytes ``[start, stop)`` of the blob, without reading the rest (fewer at its
        end); ``None`` when it is gone.

        Raises:
            StoreUnavailable: it cannot be read right now.
        """

    def open_file(self, ref: BlobRef) -> IO[bytes] | None:
        """The blob as a file open for reading, for the server to send from the disk by
        ``sendfile`` (``service.protocol``); ``None`` where the blob is no local file (an
        object in a bucket) or is gone. The caller closes it.

        Raises:
            StoreUnavailable: it cannot be opened right now.
        """
        return None

    @abstractmethod
    def delete(self, names: list[str]) -> None:
        """Delete these blobs (a missing one is no error)."""

    @abstractmethod
    def sweep(self, kept: set[str], *, older_than_s: float) -> int:
        """Delete the blobs not in ``kept`` last written over ``older_than_s`` ago (a
        write whose record never committed, a job forgotten without its blob); returns
        how many."""


class PackedSource(Protocol):
    """Bytes of a packed job blob (``service.jobs.records.pack``) read piece by piece."""

    async def read(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` (fewer at the end).

        Raises:
            StoreUnavailable: they cannot be read (the blob is gone or the store is down).
        """
        ...

    async def open_file(self) -> IO[bytes] | None:
        """The blob as an open local file (the caller closes it), or ``None`` where it is
        none: its bytes are then read with :meth:`read`."""
        ...


@dataclass(frozen=True)
class HeldBytes:
    """A packed blob the job store held itself (small: already in memory)."""

    data: bytes

    async def read(self, start: int, stop: int) -> bytes:
        return self.data[start:stop]

    async def open_file(self) -> None:
        return None


async def forget(blobs: BlobStore, names: list[str]) -> None:
    """Delete the blobs ``names`` on a worker thread, for a job store that no longer names
    them; one that cannot be deleted now is left for a sweep (an error here would hide
    the outcome of the write that dropped it)."""
    if not names:
        return
    try:
        await asyncio.to_thread(blobs.delete, names)
    except StoreUnavailable:
        logger.warning("could not delete job blobs; a sweep will", extra={"count": len(names)})


@contextlib.asynccontextmanager
async def forgotten_if_refused(
    blobs: BlobStore | None, blob: BlobRef | None
) -> AsyncIterator[None]:
    """Around the job store call that is to name ``blob`` (just written): the blob is
    deleted when that call fails for sure (a full store, which wrote nothing; an error
    raised before or inside its transaction, rolled back). A call whose outcome is
    unknown (cancelled, or unanswered within its budget: the database's thread or the
    Redis server goes on and may commit it) leaves the blob to the sweep of blobs no
    record names: deleting it could take the bytes from a job that was committed
    succeeded (or accepted) with it."""
    try:
        yield
    except StoreFull:
        await forget_blob(blobs, blob)
        raise
    except (asyncio.CancelledError, StoreUnavailable):
        if blob is not None:
            logger.warning("a job store call's outcome is unknown: its blob is left to a sweep")
        raise
    except BaseException:
        await forget_blob(blobs, blob)
        raise


async def forget_blob(blobs: BlobStore | None, blob: BlobRef | None) -> None:
    """:func:`forget` of one blob, where there is one (and a blob store)."""
    if blobs is not None and blob is not None:
        await forget(blobs, [blob.name])


@dataclass(frozen=True)
class StoredBlob:
    """A packed blob in a :class:`BlobStore`, each piece read on a worker thread."""

    blobs: BlobStore
    ref: BlobRef

    async def read(self, start: int, stop: int) -> bytes:
        data = await asyncio.to_thread(self.blobs.read_range, self.ref, start, stop)
        if data is None:
            raise StoreUnavailable(f"a job's result is no longer in {self.blobs.where}")
        return data

    async def open_file(self) -> IO[bytes] | None:
        return await asyncio.to_thread(self.blobs.open_file, self.ref)

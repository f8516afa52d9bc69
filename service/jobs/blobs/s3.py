"""Big blobs as objects in an S3-compatible bucket (AWS S3, MinIO, Ceph, R2, ...): what
replicas on several hosts share.

Each blob is one ``PUT`` (whole or not at all: S3 never shows half an object) of the key
``prefix + name``, with its SHA-256 in the object's metadata as well as in the job
store's record; a range is one ``GET`` with ``Range: bytes=a-b``. Credentials come from
boto3's standard chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, a profile, an
instance or pod role); ``endpoint_url`` points it at a server other than AWS.

Errors: a bucket over its quota or an object too large (``QuotaExceeded``,
``EntityTooLarge``, MinIO's ``XMinioStorageFull``, HTTP 507) is ``StoreFull``; any other
error of the server or the network is ``StoreUnavailable``. botocore's own text goes to
the log only.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Sequence
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from service.errors import StoreFull, StoreUnavailable
from service.jobs.blobs import BlobRef, BlobStore, blob_name, checksum

logger = logging.getLogger("atelier.jobs")

#: Error codes that mean "no room" (S3, MinIO); HTTP 507 means it too.
FULL_CODES = frozenset({"QuotaExceeded", "EntityTooLarge", "XMinioStorageFull"})
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})

#: Network bounds of one request: a stalled server fails a call, it does not hang it.
CLIENT_CONFIG = Config(
    connect_timeout=5, read_timeout=60, retries={"max_attempts": 3, "mode": "standard"}
)

_DELETE_BATCH = 1000  # DeleteObjects takes at most this many keys


class S3Blobs(BlobStore):
    """The objects under ``prefix`` in ``bucket`` (which must exist).

    Args:
        bucket: the bucket's name.
        prefix: what every key starts with (several deployments may share a bucket).
        endpoint_url: an S3-compatible server (``http://minio:9000``); ``None``: AWS.
        client: a boto3 S3 client to use instead of a new one (tests).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        client: Any = None,
    ) -> None:
        self.bucket, self.prefix = bucket, prefix
        self.where = f"the bucket {bucket!r}"
        self._s3 = client or boto3.client("s3", endpoint_url=endpoint_url, config=CLIENT_CONFIG)

    def write(self, job_id: str, kind: str, pieces: Sequence[bytes]) -> BlobRef:
        name, digest = blob_name(job_id, kind), checksum(*pieces)
        body = PiecesReader(pieces)
        try:
            self._s3.put_object(
                Bucket=self.bucket,
                Key=self.prefix + name,
                Body=body,
                ContentLength=body.size,
                Metadata={"sha256": digest},
            )
        except (BotoCoreError, ClientError) as exc:
            raise self._error(exc, "written") from exc
        return BlobRef(name, digest, body.size)

    def read(self, ref: BlobRef) -> bytes | None:
        data = self._get(ref.name)
        if data is not None and checksum(data) != ref.checksum:
            logger.error("a job's object does not match its checksum", extra={"file": ref.name})
            return None
        return data

    def read_range(self, ref: BlobRef, start: int, stop: int) -> bytes | None:
        if stop <= start:
            return b""
        try:
            return self._get(ref.name, f"bytes={start}-{stop - 1}")
        except _PastTheEnd:
            return b""

    def delete(self, names: list[str]) -> None:
        for at in range(0, len(names), _DELETE_BATCH):
            keys = [{"Key": self.prefix + name} for name in names[at : at + _DELETE_BATCH]]
            try:
                self._s3.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})
            except (BotoCoreError, ClientError) as exc:
                raise self._error(exc, "deleted") from exc

    def sweep(self, kept: set[str], *, older_than_s: float) -> int:
        limit = time.time() - older_than_s
        orphans = []
        try:
            pages = self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                for item in page.get("Contents", []):
                    name = item["Key"][len(self.prefix) :]
                    if name not in kept and item["LastModified"].timestamp() < limit:
                        orphans.append(name)
        except (BotoCoreError, ClientError) as exc:
            raise self._error(exc, "listed") from exc
        self.delete(orphans)
        return len(orphans)

    def _get(self, name: str, byte_range: str | None = None) -> bytes | None:
        extra = {} if byte_range is None else {"Range": byte_range}
        try:
            answer = self._s3.get_object(Bucket=self.bucket, Key=self.prefix + name, **extra)
            data: bytes = answer["Body"].read()
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _MISSING_CODES:
                return None
            if code == "InvalidRange":
                raise _PastTheEnd from exc
            raise self._error(exc, "read") from exc
        except BotoCoreError as exc:
            raise self._error(exc, "read") from exc
        return data

    def _error(self, exc: BotoCoreError | ClientError, doing: str) -> StoreUnavailable:
        """Our error for botocore's (whose text is logged, never answered)."""
        logger.warning(
            f"could not use the job objects' bucket ({doing})", extra={"error": str(exc)}
        )
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in FULL_CODES or status == 507:
                return StoreFull(
                    f"{self.where} is full: nothing new can be stored until finished jobs "
                    "expire or an operator gives it room"
                )
        return StoreUnavailable(f"the job objects cannot be {doing} right now")


class _PastTheEnd(Exception):
    """A range that starts at or past the object's end (S3's ``InvalidRange``)."""


class PiecesReader(io.RawIOBase):
    """A seekable, read-only file over the concatenation of ``pieces``, without joining
    them: the body of a ``put_object`` (botocore reads it to checksum it, seeks back,
    then sends it)."""

    def __init__(self, pieces: Sequence[bytes]) -> None:
        super().__init__()
        self._pieces = [memoryview(piece).cast("B") for piece in pieces]
        self.size = sum(len(piece) for piece in self._pieces)
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._at = base + offset
        return self._at

    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        written, start = 0, 0
        for piece in self._pieces:
            stop = start + len(piece)
            if written < len(out) and start <= self._at < stop:
                take = min(len(out) - written, stop - self._at)
                out[written : written + take] = piece[self._at - start : self._at - start + take]
                written += take
                self._at += take
            start = stop
        return written

"""The blob store a deployment's settings name (``blob_store``): volume or S3."""

from __future__ import annotations

from pathlib import Path

from service.jobs.blobs import BlobStore


def open_blobs(
    kind: str,
    *,
    folder: Path,
    bucket: str | None = None,
    prefix: str = "",
    endpoint_url: str | None = None,
) -> BlobStore:
    """The blob store a deployment names: ``"volume"`` (files in ``folder``) or ``"s3"``
    (``bucket``, ``prefix``, ``endpoint_url``: :class:`~service.jobs.blobs.s3.S3Blobs`).

    Raises:
        ValueError: an unknown kind, or ``s3`` without a bucket.
    """
    if kind == "volume":
        from service.jobs.blobs.volume import VolumeBlobs

        return VolumeBlobs(folder)
    if kind == "s3":
        if not bucket:
            raise ValueError("the s3 blob store needs a bucket")
        from service.jobs.blobs.s3 import S3Blobs

        return S3Blobs(bucket, prefix, endpoint_url=endpoint_url)
    raise ValueError(f"no blob store {kind!r} (volume or s3)")

"""Big inputs and results of the Redis store live in the blob store: Redis holds, in
their place, a short reference to the blob (``in:{id}``, ``out:{id}`` keep their keys,
so every script deletes, expires and evicts them as before).

A reference is ``b"ATLREF1 "`` and the :class:`~service.jobs.blobs.BlobRef` as JSON;
a packed value starts with ``b"ATL1"``, so the two never collide, and values written
before blobs existed read as they are.
"""

from __future__ import annotations

import json

from service.jobs.blobs import BlobRef

_MARK = b"ATLREF1 "

#: A reference is shorter than this (``GETRANGE 0 REF_MAX_BYTES`` reads it whole).
REF_MAX_BYTES = 512


def reference(ref: BlobRef) -> bytes:
    """What Redis holds in a big value's place."""
    return _MARK + json.dumps([ref.name, ref.checksum, ref.size]).encode()


def referenced(value: bytes) -> BlobRef | None:
    """The blob a value held by Redis refers to; ``None`` for a value held inline."""
    if not value.startswith(_MARK):
        return None
    name, digest, size = json.loads(value[len(_MARK) :])
    return BlobRef(name, digest, size)

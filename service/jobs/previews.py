"""A job's live preview as the store keeps it and its event stream sends it.

A job submitted with ``previews`` shows ``"previews": true`` in its parameters; its
worker keeps the latest preview (a small JPEG, ``service.execution.previews``) as the
job's checkpoint :data:`PREVIEW_CHECKPOINT`: one value, replaced by the next, dropped
by the store when the job ends (``JobStore.put_checkpoint``), so the store never holds
more than one preview of a running job and none of a finished one. The job's event
feed (``service.jobs.feeds``) reads it when the job changes and sends it as a
``preview`` event: ``{"image": base64 JPEG, "media_type", "width", "height", "step",
"total"}`` (``step`` of ``total`` in the model's own steps).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from service.jobs.records import JobRecord, pack, unpack

#: The name of the job's checkpoint that holds its latest preview.
PREVIEW_CHECKPOINT = "preview"
MEDIA_TYPE = "image/jpeg"


def wants_previews(record: JobRecord) -> bool:
    """Whether the job was submitted with ``previews`` (its parameters say so)."""
    return record.parameters.get("previews") is True


def pack_preview(data: bytes, width: int, height: int, step: int, total: int) -> bytes:
    """A preview as the job's checkpoint keeps it: the JPEG and what it shows."""
    header = {"media_type": MEDIA_TYPE, "width": width, "height": height}
    return pack({**header, "step": step, "total": total}, [data])


def unpack_preview(blob: bytes) -> tuple[bytes, dict[str, Any]]:
    """The inverse of :func:`pack_preview`: ``(jpeg, fields)``."""
    header, blobs = unpack(blob)
    return blobs[0], header


def preview_event(blob: bytes) -> str:
    """The data of the ``preview`` event of a packed preview (JSON)."""
    data, fields = unpack_preview(blob)
    return json.dumps({"image": base64.b64encode(data).decode("ascii"), **fields})

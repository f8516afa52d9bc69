"""What a job is: its record, its result, and the byte framing both travel in.

A job is a :class:`JobRecord` (owner, state, progress, attempts, worker, timings: small
and mutable) plus two blobs written once each: its input (the prepared request, encoded)
and its result (encoded images and the answer's fields). Every job store keeps the same
three things, so a job outlives the process that accepted it.

States::

    queued --claim--> running --finish--> succeeded | failed | cancelled
       ^                 |
       +---- lease lost or handed back (at-least-once: the work runs again)

A job is ``running`` from the moment a worker holds its lease; ``progress.step`` says
how far its batch got.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from service.priorities import BACKGROUND

if TYPE_CHECKING:
    from service.jobs.blobs import PackedSource

QUEUED, RUNNING = "queued", "running"
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
FINAL_STATES = frozenset({SUCCEEDED, FAILED, CANCELLED})


def new_job_id() -> str:
    return uuid.uuid4().hex


@dataclass
class JobRecord:
    """The small, mutable part of a job (the input and the result are blobs beside it).

    Times are Unix seconds (``time.time()``, or the Redis server's clock).
    ``deadline_at`` is when the job fails with ``deadline_exceeded`` if it has not
    finished. ``attempts`` counts the leases a worker took on it (a drained worker's
    hand-back does not count). ``webhook`` is the delivery target and its record
    (``service.jobs.webhooks``).
    """

    id: str
    kind: str
    model: str
    owner: str
    priority: str = BACKGROUND
    state: str = QUEUED
    parts: int = 1
    unit: str = "step"
    step: int = 0
    total: int = 0
    parameters: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    deadline_at: float | None = None
    attempts: int = 0
    worker: str | None = None
    error: dict[str, str] | None = None
    cancel_requested: bool = False
    input_bytes: int = 0
    result_bytes: int = 0
    webhook: dict[str, Any] | None = None
    idempotency_key: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    def public(self, *, now: float | None = None) -> dict[str, Any]:
        """The job as ``GET /v1/jobs/{id}`` shows it (without the result)."""
        now = time.time() if now is None else now
        fraction = self.step / self.total if self.total else 0.0
        webhook = None
        if self.webhook is not None:
            webhook = {k: v for k, v in self.webhook.items() if k != "url"}
        return {
            "id": self.id,
            "kind": self.kind,
            "state": self.state,
            "owner": self.owner,
            "progress": {
                "unit": self.unit,
                "step": self.step,
                "total": self.total,
                "fraction": fraction,
            },
            "parameters": self.parameters,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "queued_s": _span(self.created_at, self.started_at or self.finished_at, now),
            "running_s": _span(self.started_at, self.finished_at, now),
            "attempts": self.attempts,
            "worker": self.worker,
            "cancel_requested": self.cancel_requested,
            "error": self.error,
            "webhook": webhook,
            "result_url": f"/v1/jobs/{self.id}/result" if self.state == "succeeded" else None,
        }

    # -- storage form: flat string fields (a Redis hash, SQLite columns) ----------------
    _JSON_FIELDS = ("parameters", "error", "webhook")

    def to_fields(self) -> dict[str, str]:
        """Every field as a string; ``None`` as the empty string, dicts as JSON."""
        out: dict[str, str] = {}
        for name, value in asdict(self).items():
            if name in self._JSON_FIELDS:
                out[name] = "" if value is None else json.dumps(value)
            elif isinstance(value, bool):
                out[name] = "1" if value else "0"
            else:
                out[name] = "" if value is None else str(value)
        return out

    @classmethod
    def from_fields(cls, raw: dict[str, str] | dict[bytes, bytes]) -> JobRecord:
        """The inverse of :meth:`to_fields` (bytes or str keys and values)."""
        data = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()
        }
        values: dict[str, Any] = {}
        for f in fields(cls):
            text = data.get(f.name, "")
            values[f.name] = _PARSE.get(f.name, _text)(text)
        if values["parameters"] is None:
            values["parameters"] = {}
        return cls(**values)


def _text(text: str) -> str:
    return text


def _optional_text(text: str) -> str | None:
    return text or None


def _count(text: str) -> int:
    return int(text) if text else 0


def _optional_time(text: str) -> float | None:
    return float(text) if text else None


def _json(text: str) -> Any:
    return json.loads(text) if text else None


_PARSE: dict[str, Callable[[str], Any]] = {
    **dict.fromkeys(("parts", "step", "total", "attempts", "input_bytes", "result_bytes"), _count),
    **dict.fromkeys(("started_at", "finished_at", "deadline_at"), _optional_time),
    **dict.fromkeys(("worker", "idempotency_key"), _optional_text),
    **dict.fromkeys(("parameters", "error", "webhook"), _json),
    "created_at": float,
    "cancel_requested": lambda text: text == "1",
}


def _span(start: float | None, end: float | None, now: float) -> float | None:
    if start is None:
        return None
    return round((end if end is not None else now) - start, 4)


# ------------------------------------------------------------------------ framing
_MAGIC = b"ATL1"
T = TypeVar("T")

#: Bytes above which (de)serializing a job's input or result runs off the event loop.
OFF_LOOP_BYTES = 256 * 1024


async def off_loop_if_large(size: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, on a worker thread when ``size`` bytes make it worth the hop."""
    if size > OFF_LOOP_BYTES:
        return await asyncio.to_thread(fn, *args)
    return fn(*args)


@dataclass(frozen=True)
class Packed:
    """A packed blob (:func:`packed`) as its pieces, not joined: the framing with the JSON
    header, then each byte string as it was given. A big one is checksummed and written
    piece by piece (``BlobStore.write``), so it is never copied whole: an 8192 px print's
    76 MB PNG is held once while it is stored, not twice."""

    pieces: tuple[bytes, ...]

    @property
    def size(self) -> int:
        return sum(len(piece) for piece in self.pieces)

    def join(self) -> bytes:
        """The packed bytes in one string (a copy: for what is small, or a reader that
        needs it whole)."""
        return b"".join(self.pieces)


def packed(header: dict[str, Any], blobs: Sequence[bytes] = ()) -> Packed:
    """One JSON header and any number of byte strings as one blob, in pieces.

    Layout: ``b"ATL1"``, the header's length (u32, big-endian), the UTF-8 JSON header
    (which records each blob's length), then the blobs back to back.
    """
    head = json.dumps({**header, "_sizes": [len(b) for b in blobs]}).encode()
    return Packed((_MAGIC + struct.pack(">I", len(head)) + head, *blobs))


def pack(header: dict[str, Any], blobs: Sequence[bytes] = ()) -> bytes:
    """:func:`packed`, joined into one byte string."""
    return packed(header, blobs).join()


@dataclass(frozen=True)
class PackedLayout:
    """Where each blob of a packed job blob lies: ``spans[k]`` is blob ``k``'s
    ``[start, stop)`` in the packed bytes (the header's sizes summed after it), and
    ``header`` the JSON header without them."""

    header: dict[str, Any]
    spans: list[tuple[int, int]]


async def read_layout(source: PackedSource) -> PackedLayout:
    """The layout of the packed blob ``source`` holds, from its header alone (two reads:
    the fixed prefix, then the JSON header), so that one image of a big result is read
    without the rest. Every packed blob ever written has the sizes this needs.

    Raises:
        ValueError: the bytes are not a packed blob.
    """
    prefix = await source.read(0, 8)
    if prefix[:4] != _MAGIC or len(prefix) < 8:
        raise ValueError("not a packed job blob")
    (length,) = struct.unpack(">I", prefix[4:8])
    header = json.loads(await source.read(8, 8 + length))
    spans, at = [], 8 + length
    for size in header.pop("_sizes"):
        spans.append((at, at + size))
        at += size
    return PackedLayout(header, spans)


def unpack(data: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """The inverse of :func:`pack`.

    Raises:
        ValueError: ``data`` is not a packed blob, or is cut short.
    """
    if data[:4] != _MAGIC or len(data) < 8:
        raise ValueError("not a packed job blob")
    (length,) = struct.unpack(">I", data[4:8])
    header = json.loads(data[8 : 8 + length])
    sizes = header.pop("_sizes")
    blobs, at = [], 8 + length
    for size in sizes:
        blobs.append(data[at : at + size])
        at += size
    if at != len(data):
        raise ValueError("a packed job blob of the wrong length")
    return header, blobs


@dataclass
class JobResult:
    """What a finished job hands back: encoded images and the answer's other fields.

    ``fields`` go into the answer as they are (e.g. ``seeds``); ``images`` are encoded
    bytes of ``media_type``.
    """

    images: list[bytes]
    media_type: str
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(len(image) for image in self.images)

    def packed(self) -> Packed:
        """The result as the store keeps it, in pieces (its images are not copied)."""
        return packed({"media_type": self.media_type, "fields": self.fields}, self.images)

    @classmethod
    def from_bytes(cls, data: bytes) -> JobResult:
        header, images = unpack(data)
        return cls(images, header["media_type"], header["fields"])

"""Every kind of work a job may hold, by the name its payload records."""

from __future__ import annotations

from service.jobs.records import unpack
from service.jobs.video_work import StylizeVideoWork
from service.jobs.work import GenerateWork, StylizeWork, Work

WORK_KINDS: dict[str, type[Work]] = {
    kind.kind: kind for kind in (GenerateWork, StylizeWork, StylizeVideoWork)
}


def work_from_payload(payload: bytes) -> Work:
    """Rebuild the work a job store kept (CPU work: call it off the event loop)."""
    header, blobs = unpack(payload)
    return WORK_KINDS[header["kind"]].from_payload(header, blobs)

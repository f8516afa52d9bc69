"""Every kind of work a job may hold, by the name its payload records."""

from __future__ import annotations

from service.execution.generate import GenerateWork
from service.execution.stylize import StylizeWork
from service.execution.video import StylizeVideoWork
from service.execution.work import Work
from service.jobs.records import unpack

WORK_KINDS: dict[str, type[Work]] = {
    kind.kind: kind for kind in (GenerateWork, StylizeWork, StylizeVideoWork)
}


def work_from_payload(payload: bytes) -> Work:
    """Rebuild the work a job store kept (CPU work: call it off the event loop)."""
    header, blobs = unpack(payload)
    return WORK_KINDS[header["kind"]].from_payload(header, blobs)

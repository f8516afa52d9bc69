"""What the API answers, as small typed records: a job, its progress, a result."""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from atelier_client.errors import AtelierError, error_for

if TYPE_CHECKING:
    from PIL.Image import Image

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINISHED: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(frozen=True)
class Progress:
    """How far a job is: ``step`` of ``total`` ``unit`` (``sampler step``, ``pass``,
    ``tile`` of a print, ``frame`` of a video); ``fraction = step / total``."""

    unit: str | None
    step: int
    total: int
    fraction: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Progress:
        data = data or {}
        return cls(
            unit=data.get("unit"),
            step=int(data.get("step") or 0),
            total=int(data.get("total") or 0),
            fraction=float(data.get("fraction") or 0.0),
        )


@dataclass(frozen=True)
class Job:
    """A job as ``GET /v1/jobs/{id}`` shows it; ``raw`` is the whole JSON."""

    id: str
    kind: str
    state: str
    progress: Progress
    parameters: dict[str, Any]
    error: dict[str, Any] | None
    result_url: str | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Job:
        return cls(
            id=str(data["id"]),
            kind=str(data.get("kind", "")),
            state=str(data["state"]),
            progress=Progress.from_json(data.get("progress")),
            parameters=dict(data.get("parameters") or {}),
            error=data.get("error"),
            result_url=data.get("result_url"),
            raw=dict(data),
        )

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def result_fields(self) -> dict[str, Any]:
        """The result's fields besides the image bytes (seeds, understood, ...)."""
        result = self.raw.get("result") or {}
        return {k: v for k, v in result.items() if k not in ("images", "file_bytes")}

    @property
    def result_count(self) -> int:
        """How many files the result holds (images of a generate job; 1 otherwise)."""
        result = self.raw.get("result") or {}
        for name in ("images", "file_bytes", "seeds"):
            if isinstance(result.get(name), list):
                return len(result[name])
        return 1

    def raise_for_failure(self) -> None:
        """Raise the error of a failed (or cancelled) job as its code's exception."""
        if self.state == "failed":
            error = self.error or {}
            raise error_for(
                str(error.get("code", "internal_error")), str(error.get("message", "failed"))
            )
        if self.state == "cancelled":
            raise error_for("cancelled", f"job {self.id} was cancelled")


@dataclass(frozen=True)
class JobPage:
    """One page of ``GET /v1/jobs``: the jobs, and the next page's offset (or ``None``)."""

    jobs: list[Job]
    next_offset: int | None


@dataclass
class Result:
    """A finished stylisation: its bytes (``content``) or the file they were written to
    (``path``), its media type, and the job it came from (``None`` when answered at
    once)."""

    media_type: str
    job: Job | None = None
    data: bytes | None = None
    path: Path | None = None

    @property
    def content(self) -> bytes:
        """The bytes (read from ``path`` when the result was written to a file)."""
        if self.data is not None:
            return self.data
        if self.path is None:
            raise AtelierError("the result holds no bytes", code="empty_result")
        return self.path.read_bytes()

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_bytes(self.content)
        return path

    def image(self) -> Image:
        """The result as a PIL image (needs Pillow: ``pip install 'atelier-client[pil]'``)."""
        return open_image(self.content)


@dataclass
class GenerateResult:
    """Generated images (PNG bytes each), their seeds, how the prompt was understood,
    and the job they came from (``None`` when answered at once). ``not_learned``: the
    things the prompt names that the served model never learned to draw (empty from a
    server older than the field)."""

    images: list[bytes]
    seeds: list[int]
    understood: str | None
    ignored: list[str]
    parameters: dict[str, Any]
    job: Job | None = None
    not_learned: list[str] = field(default_factory=list)

    def pil_images(self) -> list[Image]:
        return [open_image(data) for data in self.images]


def open_image(data: bytes) -> Image:
    try:
        from PIL import Image as PILImage
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("PIL images need Pillow: pip install 'atelier-client[pil]'") from exc
    image = PILImage.open(io.BytesIO(data))
    image.load()
    return image


#: A progress callback: called with the job's progress at each change.
ProgressCallback = Callable[[Progress], None]

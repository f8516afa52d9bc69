"""The API's errors as exceptions, one class per error code.

The service answers every error as ``{"error": {"code": ..., "message": ...}}`` with a
status; :func:`error_from_response` turns that into the class named after the code
(``overloaded`` -> :class:`Overloaded`, ``send_as_job`` -> :class:`SendAsJob`) carrying
the server's message, its status and, for 429 and 503, the ``Retry-After`` it asked for.
A code this client does not know yet becomes a plain :class:`AtelierError` with that code.
A job that failed raises the class of the code its record holds.
"""

from __future__ import annotations

from typing import Any, ClassVar

import httpx


class AtelierError(Exception):
    """An error answered by the service (or recorded by a failed job).

    Attributes:
        code: the API's machine-readable code (``"validation_error"``, ...).
        message: the server's message, for people.
        status: the HTTP status (``None`` for a failed job's record).
        retry_after: seconds the server asked to wait (``Retry-After``), if any.
    """

    code: ClassVar[str] = "error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after
        if code is not None:
            self.code = code  # type: ignore[misc]  # an instance may carry an unknown code

    def __str__(self) -> str:
        status = f" ({self.status})" if self.status is not None else ""
        return f"{self.code}{status}: {self.message}"


class TransportFailed(AtelierError):
    """The server could not be reached within the retry budget (no HTTP answer)."""

    code = "transport_failed"


# One class per code the service answers (service/errors.py and the codes its routes
# name); tests/clients checks that every code the server defines has its class here.
class BadRequest(AtelierError):
    code = "bad_request"


class BadImage(AtelierError):
    code = "bad_image"


class BadVideo(AtelierError):
    code = "bad_video"


class CorruptImage(AtelierError):
    code = "corrupt_image"


class EmptyFile(AtelierError):
    code = "empty_file"


class AnimatedImage(AtelierError):
    code = "animated_image"


class ImageTooSmall(AtelierError):
    code = "image_too_small"


class AspectRatioTooLarge(AtelierError):
    code = "aspect_ratio_too_large"


class RejectedByModel(AtelierError):
    code = "rejected_by_model"


class Unauthorized(AtelierError):
    code = "unauthorized"


class JobNotFound(AtelierError):
    code = "job_not_found"


class NoThumbnail(AtelierError):
    code = "no_thumbnail"


class BodyTimeout(AtelierError):
    code = "body_timeout"


class HeaderTimeout(AtelierError):
    code = "header_timeout"


class Conflict(AtelierError):
    code = "conflict"


class JobNotSucceeded(AtelierError):
    code = "job_not_succeeded"


class IdempotentResultGone(AtelierError):
    code = "idempotent_result_gone"


class PayloadTooLarge(AtelierError):
    code = "payload_too_large"


class ImageTooLarge(AtelierError):
    code = "image_too_large"


class UnsupportedMediaType(AtelierError):
    code = "unsupported_media_type"


class UnsupportedImageType(AtelierError):
    code = "unsupported_image_type"


class NoVideoTrack(AtelierError):
    code = "no_video_track"


class UnsupportedVideo(AtelierError):
    code = "unsupported_video"


class RangeNotSatisfiable(AtelierError):
    code = "range_not_satisfiable"


class ValidationError(AtelierError):
    code = "validation_error"


class SendAsJob(AtelierError):
    code = "send_as_job"


class IdempotencyKeyReused(AtelierError):
    code = "idempotency_key_reused"


class WebhookNotAllowed(AtelierError):
    code = "webhook_not_allowed"


class Overloaded(AtelierError):
    code = "overloaded"


class RateLimited(AtelierError):
    code = "rate_limited"


class TooManyStreams(AtelierError):
    code = "too_many_streams"


class HeaderTooLarge(AtelierError):
    code = "header_too_large"


class ClientClosedRequest(AtelierError):
    code = "client_closed_request"


class Cancelled(AtelierError):
    code = "cancelled"


class InternalError(AtelierError):
    code = "internal_error"


class ResultTooLarge(AtelierError):
    code = "result_too_large"


class NotReady(AtelierError):
    code = "not_ready"


class ModelNotLoaded(AtelierError):
    code = "model_not_loaded"


class ShuttingDown(AtelierError):
    code = "shutting_down"


class StoreUnavailable(AtelierError):
    code = "store_unavailable"


class WorkerLost(AtelierError):
    code = "worker_lost"


class StoreFull(AtelierError):
    code = "store_full"


class StorageFull(AtelierError):
    """The job ran, but its result did not fit the server's storage: it failed once and is
    not run again."""

    code = "storage_full"


class DeadlineExceeded(AtelierError):
    code = "deadline_exceeded"


def _subclasses(cls: type[AtelierError]) -> list[type[AtelierError]]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


#: code -> exception class.
ERRORS_BY_CODE: dict[str, type[AtelierError]] = {
    cls.code: cls for cls in _subclasses(AtelierError) if cls is not TransportFailed
}


def error_for(
    code: str, message: str, *, status: int | None = None, retry_after: float | None = None
) -> AtelierError:
    """The exception of ``code`` (a plain :class:`AtelierError` for an unknown code)."""
    kind = ERRORS_BY_CODE.get(code)
    if kind is None:
        return AtelierError(message, code=code, status=status, retry_after=retry_after)
    return kind(message, status=status, retry_after=retry_after)


def retry_after_of(response: httpx.Response) -> float | None:
    """The ``Retry-After`` seconds of an answer (the delta form the service sends)."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def error_from_response(response: httpx.Response) -> AtelierError:
    """The exception for an error answer (its body read already)."""
    code, message = f"http_{response.status_code}", response.reason_phrase
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = str(body["error"].get("code", code))
        message = str(body["error"].get("message", message))
    elif response.text:
        message = response.text[:500]
    return error_for(
        code, message, status=response.status_code, retry_after=retry_after_of(response)
    )

"""The error envelope and the one hierarchy of errors that map to it.

Every error leaves the service as JSON ``{"error": {"code": ..., "message": ...}}`` with
a status that says whose fault it was (:data:`STATUS_DESCRIPTIONS`; a 500 means a bug
in the service, never bad input). Each kind of error is one :class:`ServiceError`
subclass with its status and default code; the middleware's early refusals, the probes,
the job records, the bare answers of ``service.protocol`` and the OpenAPI descriptions
(:func:`error_responses`) all render these classes, so a code means one thing
everywhere. A failed job keeps its error as ``as_dict()``; a client waiting for the job
gets it back as the same class (:func:`error_of_job`).

``ServiceError`` subclasses Starlette's ``HTTPException`` on purpose: FastAPI re-raises
those untouched when they surface while it parses a body, which is how the streamed
upload cap (raised from inside ``receive``) reaches the client as a 413 instead of a
generic 400.
"""

from __future__ import annotations

import logging
import math
import re
import reprlib
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger("atelier.errors")


#: What each status means, for people and for the OpenAPI description of every route.
STATUS_DESCRIPTIONS = {
    400: "bad input: an upload that is not a usable image, a body that does not parse, "
    "input the model refused",
    401: "an API key is configured and the request lacks a valid one",
    404: "no such job: unknown, expired, or another key's",
    408: "the request head or body came too slowly",
    409: "an Idempotency-Key replay whose first request's job was forgotten; a job's "
    "result file asked for before the job succeeded",
    413: "the body is over its cap, or an image is over max_pixels",
    415: "not an image format the service reads, or not multipart",
    416: "a Range outside the result file",
    422: "a field of the wrong type, out of range, or the wrong count; an Idempotency-Key "
    "reused for another request; a webhook target that is not allowed",
    429: "a queue or a job limit is full, or the key's rate or stream limit is reached: "
    "retry after Retry-After seconds",
    431: "the request head is over 16 KiB",
    499: "the client went away first: its work was cancelled (logged; nobody receives it)",
    500: "a bug in the service",
    503: "the model is not served, the job store is unreachable, or the service is shutting down",
    507: "the job store cannot write (a full disk, a Redis out of memory): retry later",
    504: "the request or job ran past its deadline",
}


class ServiceError(StarletteHTTPException):
    """An error with a stable machine-readable ``code`` and a human ``message``."""

    status_code = 400
    code = "bad_request"
    #: default code -> class, for :func:`error_of_job`
    by_code: dict[str, type[ServiceError]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:  # a class that names its own code (not a shared base)
            ServiceError.by_code.setdefault(cls.code, cls)

    def __init__(
        self, message: str, *, code: str | None = None, headers: dict[str, str] | None = None
    ):
        super().__init__(status_code=type(self).status_code, detail=message, headers=headers)
        self.code = code or type(self).code
        self.message = message

    def as_dict(self) -> dict[str, str]:
        """``{"code", "message"}``: the envelope's inside, and a failed job's error."""
        return {"code": self.code, "message": self.message}

    def body(self) -> dict[str, dict[str, str]]:
        return {"error": self.as_dict()}

    def response(self, **extra: Any) -> JSONResponse:
        """The error as an answer (``extra`` fields beside ``error``, e.g. a probe's)."""
        return JSONResponse(self.body() | extra, status_code=self.status_code, headers=self.headers)


class BadImage(ServiceError):
    status_code, code = 400, "bad_image"


class BadVideo(ServiceError):
    """A corrupt or truncated clip, or one that could not be read in time."""

    status_code, code = 400, "bad_video"


class RejectedByModel(ServiceError):
    """The model refused its input (a ``ValueError`` from the model)."""

    status_code, code = 400, "rejected_by_model"


class Unauthorized(ServiceError):
    status_code, code = 401, "unauthorized"


class RequestTimeout(ServiceError):
    """The body came too slowly (``service.protocol`` then closes the connection)."""

    status_code, code = 408, "body_timeout"


class HeaderTimeout(ServiceError):
    """The request head came too slowly (answered bare by ``service.protocol``)."""

    status_code, code = 408, "header_timeout"


class HeaderTooLarge(ServiceError):
    """The request head is over the cap (answered bare by ``service.protocol``)."""

    status_code, code = 431, "header_too_large"


class PayloadTooLarge(ServiceError):
    status_code, code = 413, "payload_too_large"


class UnsupportedMediaType(ServiceError):
    status_code, code = 415, "unsupported_media_type"


class ValidationFailed(ServiceError):
    status_code, code = 422, "validation_error"


class RetryLater(ServiceError):
    """An error the client may retry: ``retry_after_s`` (rounded up to whole seconds, at
    least 1) goes out as the ``Retry-After`` header and stays as ``retry_after_s``."""

    #: the wait when the raiser names none
    default_retry_after_s: float = 1.0

    def __init__(
        self, message: str, *, retry_after_s: float | None = None, code: str | None = None
    ):
        if retry_after_s is None:
            retry_after_s = self.default_retry_after_s
        seconds = max(1, math.ceil(retry_after_s))
        super().__init__(message, code=code, headers={"Retry-After": str(seconds)})
        self.retry_after_s = seconds


class Overloaded(RetryLater):
    """A worker queue is full; ``retry_after_s`` goes out as the ``Retry-After`` header."""

    status_code, code = 429, "overloaded"


class JobNotFound(ServiceError):
    status_code, code = 404, "job_not_found"


class Conflict(ServiceError):
    status_code, code = 409, "conflict"


class JobNotReady(ServiceError):
    status_code, code = 409, "job_not_succeeded"


class RangeNotSatisfiable(ServiceError):
    status_code, code = 416, "range_not_satisfiable"

    def __init__(self, message: str, size: int | None = None, *, code: str | None = None):
        headers = None if size is None else {"Content-Range": f"bytes */{size}"}
        super().__init__(message, code=code, headers=headers)


class ClientClosedRequest(ServiceError):
    """The client disconnected before the answer (nginx's 499): its work was cancelled."""

    status_code, code = 499, "client_closed_request"


class JobCancelled(ServiceError):
    """The job was cancelled (a DELETE, or its waiting client left)."""

    status_code, code = 499, "cancelled"


class WorkerLost(ServiceError):
    """The job's worker was lost ``max_attempts`` times; it is not tried again."""

    status_code, code = 503, "worker_lost"


class InternalError(ServiceError):
    status_code, code = 500, "internal_error"


class ResultTooLarge(ServiceError):
    """A job's result is over ``job_results_max_bytes``."""

    status_code, code = 500, "result_too_large"


class StorageFull(ServiceError):
    """A job's result could not be stored: the store's disk (or memory) is full. The job
    fails once with this code and is not run again (its work would not fit either)."""

    status_code, code = 507, "storage_full"


class NotReady(ServiceError):
    status_code, code = 503, "not_ready"


class ShuttingDown(ServiceError):
    status_code, code = 503, "shutting_down"


class StoreUnavailable(RetryLater):
    """The job store (Redis, or the SQLite file) cannot be reached; retry shortly."""

    status_code, code = 503, "store_unavailable"
    default_retry_after_s = 2


class StoreFull(StoreUnavailable):
    """The job store answers but cannot write: a full disk (SQLite), or a Redis out of
    memory or refusing writes after a failed save. Reads still work."""

    status_code, code = 507, "store_full"


class DeadlineExceeded(ServiceError):
    status_code, code = 504, "deadline_exceeded"


def error_of_job(error: dict[str, str] | None) -> ServiceError:
    """The exception that answers a synchronous request whose job failed: the class whose
    code the job recorded."""
    error = error or InternalError("internal error").as_dict()
    kind = ServiceError.by_code.get(error["code"], InternalError)
    return kind(error["message"], code=error["code"])


#: Client input quoted in a message is cut to this many characters.
MAX_ECHOED_CHARS = 80

_echo = reprlib.Repr()
_echo.maxstring = _echo.maxother = MAX_ECHOED_CHARS


def shorten(value: object) -> str:
    """``repr(value)`` cut to about ``MAX_ECHOED_CHARS`` characters, for quoting input."""
    return _echo.repr(value)


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. 'validation_error'.")
    message: str = Field(description="What was wrong, for a person.")


class ErrorBody(BaseModel):
    """The service's error envelope, as the OpenAPI schema shows it."""

    error: ErrorDetail


_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}


def error_responses(
    *statuses: int, model: type | object = ErrorBody
) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries documenting ``statuses`` with the error body ``model``."""
    return {
        status: {
            "model": model,
            "description": STATUS_DESCRIPTIONS[status],
            **({"headers": _RETRY_AFTER} if status == 429 else {}),
        }
        for status in statuses
    }


def json_error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """As :func:`error_responses`, for a route whose own answers are not JSON (an event
    stream): its errors are still ``application/json``."""
    schema = {"schema": {"$ref": "#/components/schemas/ErrorBody"}}
    return {
        status: {
            "description": STATUS_DESCRIPTIONS[status],
            "content": {"application/json": schema},
        }
        for status in statuses
    }


def _code_for_status(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "http_error"


async def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if isinstance(exc, ServiceError):
        return exc.response()
    # Routing errors (404, 405) and FastAPI's own: same envelope, code from the status.
    message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    headers = exc.headers
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
    body = {"error": {"code": _code_for_status(exc.status_code), "message": message}}
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


def _allowed_methods(request: Request) -> list[str]:
    """Every method the API documents at this path. Starlette's 405 names only the first
    route that matched the path, and a path may have one route per method (a job's GET
    and DELETE)."""
    methods: set[str] = set()
    for template, operations in request.app.openapi()["paths"].items():
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, request.url.path):
            methods |= {method.upper() for method in operations}
    return sorted(methods)


#: At most this many field errors are listed in one 422 message.
MAX_LISTED_ERRORS = 5


def _describe_validation(exc: RequestValidationError) -> str:
    """``field: problem; ...``, with field names cut and at most ``MAX_LISTED_ERRORS``."""
    errors = exc.errors()
    parts = []
    for err in errors[:MAX_LISTED_ERRORS]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "query"))
        if len(where) > MAX_ECHOED_CHARS:
            where = where[: MAX_ECHOED_CHARS - 3] + "..."
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else err.get("msg", ""))
    if len(errors) > MAX_LISTED_ERRORS:
        parts.append(f"and {len(errors) - MAX_LISTED_ERRORS} more")
    return "; ".join(parts) or "invalid request"


async def _validation_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return ValidationFailed(_describe_validation(exc)).response()


async def _unhandled_exception(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error", extra={"path": request.url.path})
    return InternalError("internal server error").response()


def install_error_handlers(app: FastAPI) -> None:
    """Route every error through the JSON envelope."""
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _validation_exception)
    app.add_exception_handler(Exception, _unhandled_exception)

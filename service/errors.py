"""The error envelope and the exceptions that map to it.

Every error leaves the service as JSON ``{"error": {"code": ..., "message": ...}}`` with
a status that says whose fault it was:

====  ===========================  ==================================================
400   ``bad_image`` and friends    an upload that is not a usable image, a bad field
401   ``unauthorized``             an API key is configured and the request lacks it
408   ``body_timeout``             the body did not arrive within ``body_timeout_s``
413   ``payload_too_large``        body over ``max_upload_bytes``; image over ``max_pixels``
404   ``job_not_found``            no such job, another key's job, or an expired one
409   ``idempotent_result_gone``   an Idempotency-Key replay whose job was forgotten
415   ``unsupported_media_type``   not an image format the service reads; not multipart
422   ``validation_error``         a field of the wrong type, out of range, wrong count;
                                   ``idempotency_key_reused``, ``webhook_not_allowed``
429   ``overloaded``               a queue or a job limit is full; ``rate_limited``,
                                   ``too_many_streams`` (all with ``Retry-After``)
499   ``client_closed_request``    the client went away first: its work was cancelled
                                   (logged and counted; nobody receives the answer)
503   ``not_ready``                model not loaded, or the service is shutting down;
                                   ``store_unavailable`` (the job store cannot be reached)
504   ``deadline_exceeded``        the request waited past ``request_timeout_s``
====  ===========================  ==================================================

A 500 means a bug in the service, never bad input.

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

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger("atelier.errors")


class ServiceError(StarletteHTTPException):
    """An error with a stable machine-readable ``code`` and a human ``message``."""

    status_code = 400
    code = "bad_request"

    def __init__(
        self, message: str, *, code: str | None = None, headers: dict[str, str] | None = None
    ):
        super().__init__(status_code=type(self).status_code, detail=message, headers=headers)
        self.code = code or type(self).code
        self.message = message


class BadRequest(ServiceError):
    status_code, code = 400, "bad_request"


class BadImage(ServiceError):
    status_code, code = 400, "bad_image"


class Unauthorized(ServiceError):
    status_code, code = 401, "unauthorized"


class RequestTimeout(ServiceError):
    """The body came too slowly (``service.protocol`` then closes the connection)."""

    status_code, code = 408, "body_timeout"


class PayloadTooLarge(ServiceError):
    status_code, code = 413, "payload_too_large"


class UnsupportedMediaType(ServiceError):
    status_code, code = 415, "unsupported_media_type"


class ValidationFailed(ServiceError):
    status_code, code = 422, "validation_error"


class Overloaded(ServiceError):
    """A worker queue is full; ``retry_after_s`` goes out as the ``Retry-After`` header."""

    status_code, code = 429, "overloaded"

    def __init__(self, message: str, *, retry_after_s: float = 1.0, code: str | None = None):
        seconds = max(1, math.ceil(retry_after_s))
        super().__init__(message, code=code, headers={"Retry-After": str(seconds)})
        self.retry_after_s = seconds


class JobNotFound(ServiceError):
    status_code, code = 404, "job_not_found"


class Conflict(ServiceError):
    status_code, code = 409, "conflict"


class ClientClosedRequest(ServiceError):
    """The client disconnected before the answer (nginx's 499): its work was cancelled."""

    status_code, code = 499, "client_closed_request"


class NotReady(ServiceError):
    status_code, code = 503, "not_ready"


class ShuttingDown(ServiceError):
    status_code, code = 503, "shutting_down"


class StoreUnavailable(ServiceError):
    """The job store (Redis, or the SQLite file) cannot be reached; retry shortly."""

    status_code, code = 503, "store_unavailable"

    def __init__(self, message: str, *, retry_after_s: int = 2):
        super().__init__(message, headers={"Retry-After": str(retry_after_s)})


class InternalError(ServiceError):
    status_code, code = 500, "internal_error"


class DeadlineExceeded(ServiceError):
    status_code, code = 504, "deadline_exceeded"


#: How a failed job's error code is answered to a client that waited for it.
_JOB_ERRORS: dict[str, type[ServiceError]] = {
    "deadline_exceeded": DeadlineExceeded,
    "cancelled": ClientClosedRequest,
    "worker_lost": NotReady,
    "shutting_down": ShuttingDown,
    "overloaded": Overloaded,
    "rejected_by_model": BadRequest,
    "bad_request": BadRequest,
}


def error_of_job(error: dict[str, str] | None) -> ServiceError:
    """The exception that answers a synchronous request whose job failed."""
    error = error or {"code": "internal_error", "message": "internal error"}
    kind = _JOB_ERRORS.get(error["code"], InternalError)
    return kind(error["message"], code=error["code"])


#: Client input quoted in a message is cut to this many characters.
MAX_ECHOED_CHARS = 80

_echo = reprlib.Repr()
_echo.maxstring = _echo.maxother = MAX_ECHOED_CHARS


def shorten(value: object) -> str:
    """``repr(value)`` cut to about ``MAX_ECHOED_CHARS`` characters, for quoting input."""
    return _echo.repr(value)


def error_body(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(code, message), status_code=status, headers=headers)


def _code_for_status(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "http_error"


async def _http_exception(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if isinstance(exc, ServiceError):
        return error_response(exc.status_code, exc.code, exc.message, exc.headers)
    # Routing errors (404, 405) and FastAPI's own: same envelope, code from the status.
    message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    headers = exc.headers
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
    return error_response(exc.status_code, _code_for_status(exc.status_code), message, headers)


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


async def _validation_exception(request: Request, exc: RequestValidationError) -> JSONResponse:
    return error_response(422, "validation_error", _describe_validation(exc))


async def _unhandled_exception(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error", extra={"path": request.url.path})
    return error_response(500, "internal_error", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    """Route every error through the JSON envelope."""
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _validation_exception)
    app.add_exception_handler(Exception, _unhandled_exception)

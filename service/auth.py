"""Optional API key: ``Authorization: Bearer <key>``.

When ``api_key`` is set it guards every ``/v1`` route and, unless
``protect_metrics_and_docs`` is off, ``/metrics`` and the API docs. The check runs in
the outermost middleware (``service.app``), before any body is read: a client without
the key gets 401 whatever it sends. Probes, the page and its assets stay open.
"""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers

from service.config import Settings
from service.errors import Unauthorized

#: Operational paths that need the key when ``protect_metrics_and_docs`` is on.
METRICS_AND_DOCS = ("/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")


def needs_api_key(path: str, method: str, settings: Settings) -> bool:
    """Whether a request to ``path`` must carry the key (CORS preflights never do)."""
    if not settings.api_key or method == "OPTIONS":
        return False
    if path == "/v1" or path.startswith("/v1/"):
        return True
    return settings.protect_metrics_and_docs and path in METRICS_AND_DOCS


def has_valid_key(headers: Headers, expected: str) -> bool:
    """Whether ``Authorization`` is ``Bearer <expected>`` (constant-time compare)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode(), expected.encode()
    )


def unauthorized() -> Unauthorized:
    return Unauthorized(
        "missing or wrong API key (send 'Authorization: Bearer <key>')",
        headers={"WWW-Authenticate": "Bearer"},
    )

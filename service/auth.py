"""Optional API key on the ``/v1`` routes: ``Authorization: Bearer <key>``."""

from __future__ import annotations

import hmac

from fastapi import Request

from service.errors import Unauthorized


def require_api_key(request: Request) -> None:
    """Pass when no key is configured or the bearer token matches (constant-time compare).

    Raises:
        Unauthorized: a key is configured and the header is missing or wrong (401).
    """
    expected = request.app.state.settings.api_key
    if not expected:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    valid = scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode(), expected.encode()
    )
    if not valid:
        raise Unauthorized(
            "missing or wrong API key (send 'Authorization: Bearer <key>')",
            headers={"WWW-Authenticate": "Bearer"},
        )

"""Who a request comes from: ``Authorization: Bearer <key>`` against the key ring.

When any key is configured (``api_keys_file``, ``api_key``) every ``/v1`` route needs
one and, unless ``protect_metrics_and_docs`` is off, ``/metrics`` and the API docs too.
The check runs in the outermost middleware (``service.app``), before any body is read: a
client without a valid key gets 401 whatever it sends. Probes, the page and its assets
stay open. The request's :class:`Caller` (the key's name and limits) goes into the
ASGI scope's state, where routes, logs and metrics read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.datastructures import Headers

from service.config import Settings
from service.errors import Unauthorized
from service.keys import ANONYMOUS, ApiKey, KeyRing

#: Operational paths that need the key when ``protect_metrics_and_docs`` is on.
METRICS_AND_DOCS = ("/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")


@dataclass(frozen=True)
class Caller:
    """The key a request came with, and its limits (the server's defaults filled in).

    ``rate`` is requests per second with bursts of ``max(1, rate)``; ``None`` is no limit.
    """

    name: str
    max_jobs: int
    rate: float | None

    @property
    def burst(self) -> float:
        return max(1.0, self.rate or 1.0)


def caller_of(key: ApiKey | None, settings: Settings) -> Caller:
    if key is None:
        return Caller(ANONYMOUS, settings.key_max_jobs, settings.key_rate)
    return Caller(
        key.name,
        key.max_jobs if key.max_jobs is not None else settings.key_max_jobs,
        key.rate if key.rate is not None else settings.key_rate,
    )


def needs_api_key(path: str, method: str, settings: Settings, keys: KeyRing) -> bool:
    """Whether a request to ``path`` must carry a key (CORS preflights never do)."""
    if not keys.required or method == "OPTIONS":
        return False
    if path == "/v1" or path.startswith("/v1/"):
        return True
    return settings.protect_metrics_and_docs and path in METRICS_AND_DOCS


def bearer_token(headers: Headers) -> str | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def unauthorized() -> Unauthorized:
    return Unauthorized(
        "missing, wrong or revoked API key (send 'Authorization: Bearer <key>')",
        headers={"WWW-Authenticate": "Bearer"},
    )

"""Named API keys and who a request comes from: the keys file, the key ring a server
accepts, and the ``Authorization: Bearer <key>`` check against it.

A key is a random token (``atl_`` and 43 URL-safe characters: 256 bits) shown once when
it is made; the keys file keeps only its SHA-256 with the key's name and limits, so the
file leaks no key. ``atelier keys add|list|revoke --file F`` edits the file and
``ATELIER_API_KEYS_FILE=F`` makes the server read it; the server re-reads the file when
it changes (checked on every authenticated request: one ``stat``) or on SIGHUP, so a
revoked key is refused from the next request on, without a restart. The single key of
``ATELIER_API_KEY`` keeps working as a key named ``default``.

When any key is configured every ``/v1`` route needs one and, unless
``protect_metrics_and_docs`` is off, ``/metrics`` and the API docs too. The check runs in
the outermost middleware (``service.app``), before any body is read: a client without a
valid key gets 401 whatever it sends. Probes, the page and its assets stay open. The
request's :class:`Caller` (the key's name and limits) goes into the ASGI scope's state,
where routes, logs and metrics read it.

With no key configured, every request is the key ``anonymous`` with the default limits
(``key_max_jobs``, ``key_rate``). Names, never keys, appear in jobs, logs and metrics.

File format (JSON)::

    {"keys": [{"name": "alice", "sha256": "<hex>", "max_jobs": 16, "rate": 2.0,
               "created_at": "2026-12-01T12:00:00Z", "revoked": false}, ...]}
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from starlette.datastructures import Headers

from service.config import Settings
from service.errors import Unauthorized

KEY_PREFIX = "atl_"
ANONYMOUS = "anonymous"
DEFAULT = "default"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

#: Operational paths that need the key when ``protect_metrics_and_docs`` is on.
METRICS_AND_DOCS = ("/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")


def key_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def check_name(name: str) -> str:
    """A key's name: letters, digits, ``_.-``, at most 64 characters."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"a key name is 1-64 letters, digits, '_', '.', '-', starting with a letter or "
            f"digit; got {name!r}"
        )
    return name


@dataclass(frozen=True)
class ApiKey:
    """One key's entry. ``max_jobs`` and ``rate`` (requests per second, bursts of
    ``max(1, rate)``) are ``None`` where the server's defaults apply."""

    name: str
    sha256: str = ""
    max_jobs: int | None = None
    rate: float | None = None
    created_at: str = ""
    revoked: bool = False


class KeyFile:
    """The keys file: read, add, revoke (each write replaces the file atomically)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def read(self) -> list[ApiKey]:
        if not self.path.exists():
            return []
        data = json.loads(self.path.read_text() or '{"keys": []}')
        return [ApiKey(**entry) for entry in data.get("keys", [])]

    def write(self, keys: list[ApiKey]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps({"keys": [asdict(k) for k in keys]}, indent=2) + "\n")
        os.chmod(temporary, 0o600)
        os.replace(temporary, self.path)

    def add(self, name: str, *, max_jobs: int | None = None, rate: float | None = None) -> str:
        """Make a key named ``name``; returns the key (the file keeps its hash only).

        Raises:
            ValueError: a bad name or limit, or a key of that name exists (revoked too).
        """
        check_name(name)
        if name in (ANONYMOUS, DEFAULT):
            raise ValueError(f"{name!r} is reserved")
        if max_jobs is not None and max_jobs < 1:
            raise ValueError(f"max_jobs must be >= 1, got {max_jobs}")
        if rate is not None and not rate > 0:
            raise ValueError(f"rate must be > 0 requests per second, got {rate}")
        keys = self.read()
        if any(k.name == name for k in keys):
            raise ValueError(f"a key named {name!r} exists already")
        token = new_token()
        created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        keys.append(ApiKey(name, key_hash(token), max_jobs, rate, created))
        self.write(keys)
        return token

    def revoke(self, name: str) -> None:
        keys = self.read()
        if not any(k.name == name for k in keys):
            raise ValueError(f"no key named {name!r}")
        self.write([replace(k, revoked=True) if k.name == name else k for k in keys])


class KeyRing:
    """The keys a server accepts, kept in step with the keys file.

    Args:
        path: the keys file (``api_keys_file``), or ``None``.
        single_key: ``api_key``, accepted as the key named ``default``.
    """

    def __init__(self, path: Path | None, single_key: str | None) -> None:
        self.path = None if path is None else Path(path)
        self._single = None if not single_key else ApiKey(DEFAULT, key_hash(single_key))
        self._keys: list[ApiKey] = []
        self._stamp: tuple[int, int, int] | None = None
        self._lock = threading.Lock()
        self.reload()

    @property
    def required(self) -> bool:
        """Whether requests must carry a key (one is configured)."""
        return self._single is not None or self.path is not None

    def _file_stamp(self) -> tuple[int, int, int] | None:
        if self.path is None:
            return None
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_mtime_ns, info.st_size, info.st_ino

    def reload(self) -> None:
        """Read the keys file again (a missing file means no keys from it)."""
        if self.path is None:
            return
        with self._lock:
            self._stamp = self._file_stamp()
            self._keys = KeyFile(self.path).read() if self._stamp is not None else []

    def _refresh(self) -> None:
        if self.path is not None and self._file_stamp() != self._stamp:
            self.reload()

    def identify(self, token: str) -> ApiKey | None:
        """The live key whose hash matches ``token``, compared in constant time against
        every key (a revoked key matches nothing)."""
        self._refresh()
        digest = key_hash(token)
        found = None
        for key in [*self._keys, *([self._single] if self._single else [])]:
            if hmac.compare_digest(digest, key.sha256) and not key.revoked:
                found = key
        return found

    def names(self) -> list[str]:
        self._refresh()
        names = [k.name for k in self._keys if not k.revoked]
        return names + ([DEFAULT] if self._single else [])


# ------------------------------------------------------------- a request's caller


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

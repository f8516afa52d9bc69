"""What the sync and the async client share, free of I/O: the retry rule, the event
stream's parser, reading inputs, telling a video from a photo, a result's byte range."""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from atelier_client.errors import AtelierError, error_from_response
from atelier_client.types import Progress, ProgressCallback

#: Where a client connects when no URL is given and ``ATELIER_SERVER`` is unset.
DEFAULT_SERVER = "http://127.0.0.1:8000"
#: A photo, a painting or a mask: a path, bytes, or a binary file object.
ImageInput = str | os.PathLike[str] | bytes | IO[bytes]


def server_url(base_url: str | None) -> str:
    return (base_url or os.environ.get("ATELIER_SERVER") or DEFAULT_SERVER).rstrip("/")


def api_key(key: str | None) -> str | None:
    return key if key is not None else os.environ.get("ATELIER_API_KEY") or None


def auth_headers(key: str | None) -> dict[str, str]:
    return {} if key is None else {"Authorization": f"Bearer {key}"}


@dataclass
class Retry:
    """When a request is tried again.

    A 429 or a 503 (other than ``model_not_loaded``) waits the ``Retry-After`` the
    server sent, else ``backoff_s * 2^k`` (``k`` the retry's index, at most ``max_backoff_s``,
    with jitter); so does a request that got no answer (a refused connection, a connection
    that broke mid-request): every POST carries an ``Idempotency-Key``, so a retry
    answers the first request's job and never makes a second one. Retries stop after
    ``attempts`` tries or once the waits would pass ``budget_s`` seconds in all.
    ``on_retry(reason, delay_s)`` is told of each retry.
    """

    attempts: int = 6
    budget_s: float = 60.0
    backoff_s: float = 0.25
    max_backoff_s: float = 8.0
    on_retry: Callable[[str, float], None] | None = field(default=None, repr=False)

    def state(self) -> RetryState:
        return RetryState(self)


#: 503 codes that no wait cures.
PERMANENT_503 = frozenset({"model_not_loaded"})


@dataclass
class RetryState:
    """One call's retries so far (:class:`Retry`)."""

    policy: Retry
    tries: int = 0
    waited_s: float = 0.0

    def _delay(self, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        backoff = self.policy.backoff_s * (1 << max(0, self.tries - 1))
        return min(self.policy.max_backoff_s, backoff) * (0.5 + random.random() / 2)

    def _next(self, retry_after: float | None, reason: str) -> float | None:
        self.tries += 1
        if self.tries >= self.policy.attempts:
            return None
        delay = self._delay(retry_after)
        if self.waited_s + delay > self.policy.budget_s:
            return None
        self.waited_s += delay
        if self.policy.on_retry is not None:
            self.policy.on_retry(reason, delay)
        return delay

    def after_answer(self, response: httpx.Response) -> float | None:
        """Seconds to wait before trying again after this answer, or ``None``: do not."""
        if response.status_code not in (429, 503):
            return None
        error = error_from_response(response)
        if error.code in PERMANENT_503:
            return None
        return self._next(error.retry_after, f"{response.status_code} {error.code}")

    def after_error(self, exc: httpx.TransportError) -> float | None:
        """Seconds to wait before trying again after no answer, or ``None``: give up."""
        return self._next(None, f"{type(exc).__name__}: {exc}")


@dataclass
class Event:
    """One Server-Sent Event: its name and data (``job`` for ``progress``/``done``)."""

    event: str
    data: str


class EventParser:
    """Server-Sent Events from lines (the ``text/event-stream`` format): ``event:`` and
    ``data:`` fields, an empty line ends an event; comments (``:``) are skipped."""

    def __init__(self) -> None:
        self._event = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        line = line.rstrip("\r\n")
        if not line:
            if not self._data:
                self._event = "message"
                return None
            event = Event(self._event, "\n".join(self._data))
            self._event, self._data = "message", []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


def read_input(item: ImageInput) -> tuple[str, bytes]:
    """An upload's file name and bytes (a path is read, a file object read whole)."""
    if isinstance(item, bytes):
        return "upload", item
    if isinstance(item, str | os.PathLike):
        path = Path(item)
        return path.name, path.read_bytes()
    data = item.read()
    return Path(str(getattr(item, "name", "upload"))).name, data


_IMAGE_SIGNATURES = (b"\x89PNG", b"\xff\xd8\xff", b"BM")


def needs_job(data: bytes) -> bool:
    """Whether the server may take ``data`` as a video (and so only as a job): anything
    but a PNG, JPEG, BMP or WebP. A GIF may be animated (a video): it goes as a job too,
    which a still GIF also may."""
    if data.startswith(_IMAGE_SIGNATURES):
        return False
    return not (data[:4] == b"RIFF" and data[8:12] == b"WEBP")


class ProgressBar:
    """A tqdm bar moved by a job's progress (``pip install 'atelier-client[progress]'``)."""

    def __init__(self, description: str | None = None, file: IO[str] | None = None) -> None:
        try:
            from tqdm import tqdm
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("a progress bar needs tqdm: pip install tqdm") from exc
        self._bar = tqdm(desc=description, disable=None, file=file)

    def __call__(self, progress: Progress) -> None:
        if progress.total and self._bar.total != progress.total:
            self._bar.total = progress.total
            self._bar.unit = progress.unit or "it"
        self._bar.update(progress.step - self._bar.n)

    def close(self) -> None:
        self._bar.close()


def progress_callbacks(
    progress: ProgressCallback | None, bar: bool | ProgressBar
) -> tuple[ProgressCallback | None, ProgressBar | None]:
    """The callback a call reports to (``progress``, a new bar when ``bar=True``, or both),
    and the bar to close when done."""
    made = ProgressBar() if bar is True else (bar or None)
    if made is None:
        return progress, None
    if progress is None:
        return made, made

    def both(update: Progress) -> None:
        made(update)
        progress(update)

    return both, made


def content_range_start(response: httpx.Response) -> int:
    """Where a ``206``'s bytes start (``Content-Range: bytes a-b/n``)."""
    match = re.match(r"bytes (\d+)-", response.headers.get("content-range", ""))
    if match is None:
        raise AtelierError("a 206 answer without Content-Range", code="bad_answer")
    return int(match.group(1))


def iter_files(
    field_name: str, items: list[tuple[str, bytes]]
) -> Iterator[tuple[str, tuple[str, bytes, str]]]:
    for name, data in items:
        yield field_name, (name, data, "application/octet-stream")


def check(response: httpx.Response) -> httpx.Response:
    """``response`` if it succeeded (2xx), else its error raised (its body read)."""
    if response.is_success:
        return response
    raise error_from_response(response)

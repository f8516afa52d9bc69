"""Webhooks: a job's completion (and, opt-in, its progress) POSTed to the client's URL.

A request names a ``webhook`` URL and optionally ``webhook_events`` (``completed`` by
default; ``progress`` at most every ``webhook_progress_interval_s``). When an event is
due the store marks the job (``WebhookOutbox.due_webhooks``); a :class:`WebhookDispatcher`
in every worker process takes due deliveries under a visibility timeout, so a
dispatcher that dies loses nothing, and delivery never blocks the job or its result.

Each delivery is signed with the Standard Webhooks scheme (``webhook-id``,
``webhook-timestamp``, ``webhook-signature`` headers; the secret
``ATELIER_WEBHOOK_SECRET`` in ``whsec_`` form), so receivers verify it with the
``standardwebhooks`` package. ``webhook-id`` is the same on every retry of one event
(``{job}.completed``, ``{job}.progress.{step}``), for receivers that deduplicate. The
body is ``{"type": "job.completed" | "job.progress", "timestamp", "data": <the job as
GET /v1/jobs/{id} shows it, without the images>}``.

A failed delivery (a network error, a timeout, a status other than 2xx, or a redirect,
which is never followed) is retried after ``webhook_retry_base_s`` x 2^(attempt-1)
seconds, up to ``webhook_max_attempts``; the job's ``webhook`` field records the
attempts, the last status or error, and the events delivered.

Targets are checked when the request arrives (a 422 there) and again at each delivery
(server-side request forgery): ``http`` or ``https`` only, no credentials in the URL,
the host on ``webhook_allowed_hosts`` (exact names or ``*.example.com``; none by
default, so webhooks are refused until an operator allows hosts), and every address the
name resolves to public unless ``webhook_allow_private_addresses``. The name is
resolved once per delivery and the connection goes to that address (``Host`` and TLS
SNI carry the name), so a second DNS answer cannot point the request elsewhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

import httpx
from standardwebhooks.webhooks import Webhook

from service.config import Settings
from service.jobs.records import JobRecord
from service.jobs.shared import stop_task
from service.jobs.store import Delivery, StoreUnavailable, WebhookOutbox

logger = logging.getLogger("atelier.jobs.webhooks")

#: The events a webhook may ask for: a JSON body's ``webhook_events`` list.
WebhookEvent = Literal["completed", "progress"]
EVENTS: tuple[str, ...] = get_args(WebhookEvent)
_ONE_EVENT = "|".join(EVENTS)
#: A form's ``webhook_events``: one or two of :data:`EVENTS`, comma-separated
#: (:func:`parse_events` reads it).
EVENTS_PATTERN = rf"^ *({_ONE_EVENT}) *(, *({_ONE_EVENT}) *)?$"


def parse_events(text: str | None) -> list[str] | None:
    """A form's ``webhook_events`` (matched by :data:`EVENTS_PATTERN`) as the list a
    JSON body gives: ``" progress, completed"`` -> ``["progress", "completed"]``."""
    return None if text is None else [event.strip() for event in text.split(",")]


#: ``(host, port) -> addresses`` (tests pass their own to stand in for DNS).
Resolver = Callable[[str, int], Awaitable[list[str]]]


class WebhookRefused(ValueError):
    """The target is not allowed; the message says why."""


async def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the system's resolver, off the event loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


@dataclass(frozen=True)
class WebhookPolicy:
    """Which targets are allowed (``service.config.Settings`` fills it: :meth:`of`)."""

    allowed_hosts: tuple[str, ...] = ()
    allow_private: bool = False

    @classmethod
    def of(cls, settings: Settings) -> WebhookPolicy:
        """The policy of ``webhook_allowed_hosts`` and ``webhook_allow_private_addresses``:
        the one checked when a request arrives and at each delivery."""
        return cls(tuple(settings.webhook_allowed_hosts), settings.webhook_allow_private_addresses)

    def host_allowed(self, host: str) -> bool:
        for pattern in self.allowed_hosts:
            pattern = pattern.lower().rstrip(".")
            if pattern.startswith("*.") and host.endswith(pattern[1:]):
                return True
            if host == pattern:
                return True
        return False


@dataclass(frozen=True)
class Target:
    """A checked webhook target: where to connect, and what to call it."""

    url: str
    scheme: str
    host: str
    port: int
    path: str
    addresses: tuple[str, ...]


def parse_target(url: str, policy: WebhookPolicy) -> tuple[str, str, int, str]:
    """``(scheme, host, port, path?query)`` of an allowed URL (no DNS yet).

    Raises:
        WebhookRefused: not http(s), credentials in it, no host, a host not allowed.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise WebhookRefused(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise WebhookRefused("the URL must be http or https")
    if parts.username or parts.password:
        raise WebhookRefused("the URL must not carry credentials")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise WebhookRefused("the URL has no host")
    if not policy.host_allowed(host):
        allowed = ", ".join(policy.allowed_hosts) or "none (webhook_allowed_hosts is empty)"
        raise WebhookRefused(f"the host {host!r} is not allowed; allowed: {allowed}")
    port = port or (443 if parts.scheme == "https" else 80)
    path = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    return parts.scheme, host, port, path


async def check_target(url: str, policy: WebhookPolicy, resolver: Resolver = resolve) -> Target:
    """Check ``url`` and resolve its host once (see the module docstring).

    Raises:
        WebhookRefused: the URL, its host or one of its addresses is not allowed.
    """
    scheme, host, port, path = parse_target(url, policy)
    try:
        addresses = [ipaddress.ip_address(host).compressed]
    except ValueError:
        try:
            addresses = await resolver(host, port)
        except OSError as exc:
            raise WebhookRefused(f"the host {host!r} does not resolve: {exc}") from None
    if not addresses:
        raise WebhookRefused(f"the host {host!r} does not resolve")
    if not policy.allow_private:
        for address in addresses:
            if not ipaddress.ip_address(address).is_global:
                raise WebhookRefused(
                    f"the host {host!r} resolves to {address}, a private, loopback or "
                    "reserved address (webhook_allow_private_addresses is off)"
                )
    return Target(url, scheme, host, port, path, tuple(addresses))


def message_of(record: JobRecord) -> tuple[str, str]:
    """``(event, webhook-id)`` of the delivery due for ``record`` now."""
    if record.finished:
        return "completed", f"{record.id}.completed"
    return "progress", f"{record.id}.progress.{record.step}"


@dataclass(frozen=True)
class WebhookSettings:
    policy: WebhookPolicy
    secret: str | None
    timeout_s: float = 10.0
    max_attempts: int = 8
    retry_base_s: float = 5.0


class WebhookDispatcher:
    """Delivers due webhooks of the store's jobs (see the module docstring).

    Args:
        store: the job store's webhook outbox (``JobStore`` is one).
        settings: the policy, the signing secret and the retry schedule.
        resolver: the DNS lookup (tests stand in for it).
        poll_s: how often due deliveries are looked for.
        concurrency: deliveries in flight at once.
    """

    def __init__(
        self,
        store: WebhookOutbox,
        settings: WebhookSettings,
        *,
        resolver: Resolver = resolve,
        poll_s: float = 0.5,
        concurrency: int = 8,
    ) -> None:
        self.store = store
        self.settings = settings
        self.resolver = resolver
        self.poll_s = poll_s
        self._slots = asyncio.Semaphore(concurrency)
        self._signer = Webhook(settings.secret) if settings.secret else None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        await stop_task(self._task)

    async def _run(self) -> None:
        lease = self.settings.timeout_s * 2 + 5
        while True:
            try:
                due = await self.store.due_webhooks(lease, limit=16)
            except StoreUnavailable:
                due = []
            if due:
                await asyncio.gather(*(self._deliver_one(delivery) for delivery in due))
            else:
                await asyncio.sleep(self.poll_s)

    async def _deliver_one(self, delivery: Delivery) -> None:
        async with self._slots:
            try:
                await self.deliver(delivery)
            except StoreUnavailable:
                pass  # the visibility timeout brings the delivery back
            except Exception:
                logger.exception("webhook delivery failed", extra={"job_id": delivery.record.id})

    def payload(self, record: JobRecord, event: str) -> str:
        data = record.public()
        data["result_url"] = f"/v1/jobs/{record.id}"
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        return json.dumps({"type": f"job.{event}", "timestamp": stamp, "data": data})

    async def deliver(self, delivery: Delivery) -> None:
        """Send the event due for the job once; record the outcome and the next try."""
        record, lease = delivery.record, delivery.lease
        webhook = dict(record.webhook or {})
        event, message_id = message_of(record)
        delivered = list(webhook.get("delivered", []))
        if message_id in delivered or event not in webhook.get("events", ()):
            await self.store.update_webhook(record.id, webhook, None, lease=lease)
            return
        if webhook.get("message") != message_id:
            webhook.update(message=message_id, attempts=0)
        webhook["attempts"] = webhook.get("attempts", 0) + 1
        status, error = await self._post(webhook["url"], message_id, self.payload(record, event))
        webhook.update(last_status=status, last_error=error, last_attempt_at=await self.store.now())
        due = None
        if status is not None and 200 <= status < 300:
            webhook["delivered"] = [*delivered, message_id][-16:]
            webhook["attempts"] = 0
        elif webhook["attempts"] < self.settings.max_attempts:
            backoff = self.settings.retry_base_s * 2 ** (webhook["attempts"] - 1)
            due = await self.store.now() + backoff
        else:
            webhook["gave_up"] = [*webhook.get("gave_up", []), message_id][-16:]
            logger.warning("webhook given up", extra={"job_id": record.id, "error": error})
        await self.store.update_webhook(record.id, webhook, due, lease=lease)

    async def _post(self, url: str, message_id: str, body: str) -> tuple[int | None, str | None]:
        """POST ``body`` to ``url`` pinned to one checked address: ``(status, error)``."""
        if self._signer is None:
            return None, "no webhook_secret is configured"
        try:
            target = await check_target(url, self.settings.policy, self.resolver)
        except WebhookRefused as exc:
            return None, f"refused: {exc}"
        now = datetime.now(UTC)
        headers = {
            "content-type": "application/json",
            "host": _host_header(target),
            "user-agent": "atelier-webhooks",
            "webhook-id": message_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self._signer.sign(message_id, now, body),
        }
        address = target.addresses[0]
        literal = f"[{address}]" if ":" in address else address
        pinned = f"{target.scheme}://{literal}:{target.port}{target.path}"
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
        try:
            async with httpx.AsyncClient(
                timeout=self.settings.timeout_s, follow_redirects=False, trust_env=False
            ) as client:
                response = await client.post(
                    pinned, content=body.encode(), headers=headers, extensions=extensions
                )
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"[:200]
        if 300 <= response.status_code < 400:
            return response.status_code, "redirects are not followed"
        return response.status_code, None


def _host_header(target: Target) -> str:
    default = 443 if target.scheme == "https" else 80
    host = f"[{target.host}]" if ":" in target.host else target.host
    return host if target.port == default else f"{host}:{target.port}"


def webhook_request(url: str | None, events: Sequence[str] | None) -> dict[str, Any] | None:
    """The job's ``webhook`` field for a request's URL and events."""
    if url is None:
        return None
    return {"url": url, "events": sorted(set(events or ("completed",)))}

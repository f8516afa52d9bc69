"""Verify the service's webhook deliveries (Standard Webhooks), with the standard library.

A delivery carries ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and
``webhook-signature``: space-separated ``v1,<base64>`` signatures, each

.. math:: \\mathrm{base64}(\\mathrm{HMAC\\text{-}SHA256}(k, \\mathrm{id} \\| . \\|
          \\mathrm{timestamp} \\| . \\| \\mathrm{body}))

with ``k`` the secret's bytes: the base64 after ``whsec_`` (``ATELIER_WEBHOOK_SECRET``).
A delivery is genuine when one of its signatures matches (compared in constant time)
and its timestamp is within ``tolerance_s`` of now (a replayed old delivery is refused).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from atelier_client.errors import AtelierError

#: How far a delivery's timestamp may be from now (Standard Webhooks' default).
TOLERANCE_S = 300.0


class WebhookVerificationError(AtelierError):
    """A delivery whose signature or timestamp does not hold."""

    code = "webhook_verification_failed"


def _secret_bytes(secret: str | bytes) -> bytes:
    if isinstance(secret, bytes):
        return secret
    try:
        return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except binascii.Error as exc:
        raise ValueError("the webhook secret is not base64 after 'whsec_'") from exc


def sign_webhook(secret: str | bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,<base64>`` signature of a delivery (what the server sends)."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_secret_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def verify_webhook(
    headers: Mapping[str, str],
    body: bytes | str,
    secret: str | bytes,
    *,
    tolerance_s: float = TOLERANCE_S,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a delivery and return its JSON payload.

    Args:
        headers: the delivery's headers (any mapping; names are matched without case).
        body: the raw body, exactly as received.
        secret: ``whsec_...`` (the server's ``ATELIER_WEBHOOK_SECRET``), or its bytes.

    Raises:
        WebhookVerificationError: a header missing, no signature matching, or a
            timestamp further than ``tolerance_s`` from now.
    """
    lower = {name.lower(): value for name, value in headers.items()}
    raw = body.encode() if isinstance(body, str) else body
    try:
        message_id = lower["webhook-id"]
        stamp = lower["webhook-timestamp"]
        signatures = lower["webhook-signature"]
    except KeyError as exc:
        raise WebhookVerificationError(f"the delivery has no {exc.args[0]} header") from None
    try:
        timestamp = int(stamp)
    except ValueError:
        raise WebhookVerificationError(f"webhook-timestamp is not an integer: {stamp!r}") from None
    now = time.time() if now is None else now
    if abs(now - timestamp) > tolerance_s:
        raise WebhookVerificationError(
            f"webhook-timestamp is {now - timestamp:+.0f} s from now (tolerance {tolerance_s:g} s)"
        )
    expected = sign_webhook(secret, message_id, timestamp, raw).encode()
    for signature in signatures.split():
        if signature.startswith("v1,") and hmac.compare_digest(signature.encode(), expected):
            payload: dict[str, Any] = json.loads(raw)
            return payload
    raise WebhookVerificationError("no signature of the delivery matches the secret")

"""The client against what the server declares: its options against the OpenAPI
schema (a field the server grows that the client cannot send fails here), its
exception classes against every error code the service answers, and webhook
verification against deliveries the server signed."""

from __future__ import annotations

import base64
import http.server
import queue
import re
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_type_hints

import pytest
import standardwebhooks
from atelier_client import (
    ERRORS_BY_CODE,
    Client,
    WebhookVerificationError,
    sign_webhook,
    verify_webhook,
)
from atelier_client.options import (
    CHOICES,
    GENERATE_FIELDS,
    STYLIZE_FIELDS,
    STYLIZE_UPLOADS,
    GenerateOptions,
    StylizeOptions,
)
from service_fakes import Fakes, make_settings, served

from service.app import create_app
from service.errors import ServiceError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    return create_app(make_settings(), model_entries=Fakes().entries()).openapi()


def _schema(openapi: dict[str, Any], ref: str) -> dict[str, Any]:
    return openapi["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def _enum(prop: dict[str, Any]) -> list[str] | None:
    """The choices of a property: its enum, its items' or its non-null alternative's."""
    for kind in [prop, prop.get("items", {}), *prop.get("anyOf", [])]:
        found = kind.get("enum") or (kind.get("items") or {}).get("enum")
        if found:
            return list(found)
    return None


def test_the_stylize_options_are_the_form_fields_of_the_servers_schema(openapi):
    body = openapi["paths"]["/v1/stylize"]["post"]["requestBody"]["content"]
    properties = _schema(openapi, body["multipart/form-data"]["schema"]["$ref"])["properties"]
    assert set(properties) - set(STYLIZE_UPLOADS) == STYLIZE_FIELDS
    for name, choices in CHOICES.items():
        if name in properties and _enum(properties[name]) is not None:
            assert sorted(_enum(properties[name])) == sorted(choices), name


def test_the_generate_options_are_the_json_fields_of_the_servers_schema(openapi):
    body = openapi["paths"]["/v1/generate"]["post"]["requestBody"]["content"]
    properties = _schema(openapi, body["application/json"]["schema"]["$ref"])["properties"]
    assert set(properties) - {"prompt"} == GENERATE_FIELDS
    assert sorted(_enum(properties["webhook_events"])) == sorted(CHOICES["webhook_events"])


_JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string"}


@pytest.mark.parametrize(
    "options, route", [(StylizeOptions, "stylize"), (GenerateOptions, "generate")]
)
def test_each_scalar_option_has_the_servers_type(openapi, options, route):
    path = f"/v1/{route}"
    content = openapi["paths"][path]["post"]["requestBody"]["content"]
    schema = next(iter(content.values()))["schema"]
    properties = _schema(openapi, schema["$ref"])["properties"]
    for name, hint in get_type_hints(options).items():
        if hint in _JSON_TYPES:  # plain scalars (Literal and list options are checked above)
            prop = properties[name]
            kinds = [prop["type"]] if "type" in prop else [k["type"] for k in prop["anyOf"]]
            assert _JSON_TYPES[hint] in kinds, name


def _codes_the_service_answers() -> set[str]:
    """The default codes of the service's error classes, and the codes its modules pass
    them (``code="..."``, ``code = "a" if ... else "b"``); not the OpenAI route's, which
    answers in OpenAI's own envelope."""
    codes = {code for code, kind in ServiceError.by_code.items() if "openai" not in kind.__module__}
    for source in (ROOT / "service").rglob("*.py"):
        if source.name == "openai_images.py":
            continue
        for line in re.findall(r"\bcode\s*=\s*(\"[a-z_]+\".*)", source.read_text()):
            codes |= set(re.findall(r'(?:^|else )"([a-z_]+)"', line))
    return codes


def test_every_error_code_of_the_service_has_its_class_named_after_it():
    codes = _codes_the_service_answers()
    assert {"overloaded", "send_as_job", "job_not_found", "unsupported_video"} <= codes
    missing = sorted(codes - set(ERRORS_BY_CODE))
    assert not missing, f"no exception class for {missing}"
    for code, kind in ERRORS_BY_CODE.items():
        assert kind.__name__ == "".join(part.title() for part in code.split("_")), code


class _Receiver(http.server.BaseHTTPRequestHandler):
    deliveries: queue.Queue[tuple[dict[str, str], bytes]]

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.deliveries.put((dict(self.headers.items()), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_a_webhook_the_server_signed_verifies_and_a_tampered_one_is_refused():
    secret = "whsec_" + base64.b64encode(b"atelier-client-test-secret-32byt").decode()

    class Receiver(_Receiver):
        deliveries: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()

    hooks = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=hooks.serve_forever, daemon=True)
    thread.start()
    settings = make_settings(
        webhook_secret=secret,
        webhook_allowed_hosts=["127.0.0.1"],
        webhook_allow_private_addresses=True,
    )
    try:
        app = create_app(settings, model_entries=Fakes().entries())
        with served(app) as url, Client(url) as client:
            hook = f"http://127.0.0.1:{hooks.server_port}/hook"
            job = client.submit_generate("a red circle", seed=4, steps=2, webhook=hook)
            headers, body = Receiver.deliveries.get(timeout=30)
    finally:
        hooks.shutdown()
        hooks.server_close()
    payload = verify_webhook(headers, body, secret)
    assert payload["type"] == "job.completed" and payload["data"]["id"] == job.id
    # the reference implementation agrees on the same delivery
    standardwebhooks.Webhook(secret).verify(body, headers)
    # tampered: another body, another secret, a replay long after, no signature
    with pytest.raises(WebhookVerificationError, match="no signature"):
        verify_webhook(headers, body.replace(b"succeeded", b"failed"), secret)
    other = "whsec_" + base64.b64encode(b"another-secret-of-thirty-two-byt").decode()
    with pytest.raises(WebhookVerificationError, match="no signature"):
        verify_webhook(headers, body, other)
    with pytest.raises(WebhookVerificationError, match="from now"):
        verify_webhook(headers, body, secret, now=time.time() + 3600)
    with pytest.raises(WebhookVerificationError, match="webhook-signature"):
        verify_webhook(
            {k: v for k, v in headers.items() if k.lower() != "webhook-signature"}, body, secret
        )


def test_the_clients_signature_is_the_reference_implementations():
    secret = "whsec_" + base64.b64encode(bytes(range(32))).decode()
    stamp = int(time.time())
    reference = standardwebhooks.Webhook(secret)
    expected = reference.sign("msg_1", datetime.fromtimestamp(stamp, tz=UTC), '{"a": 1}')
    assert sign_webhook(secret, "msg_1", stamp, b'{"a": 1}') == expected

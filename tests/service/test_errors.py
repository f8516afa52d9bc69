"""The one error hierarchy: every class documented, codes unique, a job's error comes
back as its own class, and every refusal the service makes uses the envelope."""

from __future__ import annotations

import pytest

from service import errors
from service.errors import STATUS_DESCRIPTIONS, ServiceError, error_of_job

CLASSES = sorted(ServiceError.by_code.values(), key=lambda cls: cls.__name__)


@pytest.mark.parametrize("kind", CLASSES, ids=lambda cls: cls.__name__)
def test_every_error_class_has_a_documented_status_and_its_own_code(kind):
    assert kind.status_code in STATUS_DESCRIPTIONS
    assert ServiceError.by_code[kind.code] is kind
    assert [c for c in CLASSES if c.code == kind.code] == [kind]


@pytest.mark.parametrize("kind", CLASSES, ids=lambda cls: cls.__name__)
def test_a_failed_jobs_error_comes_back_as_its_class(kind):
    original = kind("what went wrong")
    again = error_of_job(original.as_dict())
    assert type(again) is kind
    assert (again.status_code, again.code, again.message) == (
        original.status_code,
        original.code,
        original.message,
    )
    assert again.body() == {"error": {"code": original.code, "message": original.message}}


def test_an_unknown_or_missing_job_error_is_an_internal_error():
    assert error_of_job({"code": "no_such_code", "message": "m"}).status_code == 500
    assert error_of_job(None).code == "internal_error"


@pytest.mark.parametrize(
    ("kind", "given", "header"),
    [
        (errors.Overloaded, None, "1"),
        (errors.Overloaded, 0.2, "1"),
        (errors.Overloaded, 2.5, "3"),
        (errors.StoreUnavailable, None, "2"),
        (errors.StoreFull, 4, "4"),
    ],
)
def test_retry_later_errors_send_whole_seconds_of_retry_after(kind, given, header):
    error = kind("busy") if given is None else kind("busy", retry_after_s=given)
    assert error.headers == {"Retry-After": header}
    assert error.retry_after_s == int(header)


def test_a_shared_base_without_its_own_code_is_not_a_job_error_class():
    assert errors.RetryLater not in ServiceError.by_code.values()


def test_error_responses_document_each_status_once(client):
    documented = client.get("/openapi.json").json()["paths"]["/v1/generate"]["post"]["responses"]
    for status in ("400", "401", "422", "429", "503", "504"):
        assert documented[status]["description"] == STATUS_DESCRIPTIONS[int(status)]
    assert documented["429"]["headers"]["Retry-After"]


def test_early_refusals_use_the_envelope(client_factory):
    client = client_factory(api_key="k", max_json_bytes=1024)
    unauthorized = client.get("/v1/me")
    too_large = client.post(
        "/v1/generate", content=b"x" * 2048, headers={"Authorization": "Bearer k"}
    )
    assert unauthorized.json()["error"]["code"] == "unauthorized"
    assert unauthorized.headers["www-authenticate"] == "Bearer"
    assert too_large.status_code == 413
    assert too_large.json()["error"]["code"] == "payload_too_large"
    assert errors.PayloadTooLarge.status_code == 413

"""Probes, models listing, metrics, OpenAPI, the page, API key, CORS, shutdown."""

from __future__ import annotations

import threading

import corpus
import pytest
from fastapi.testclient import TestClient
from service_fakes import make_settings

from service.app import create_app
from service.workers.registry import ModelEntry
from service.workers.style_transfer import run_stylize


def test_healthz(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_reports_every_model(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["models"] == {"adain": "loaded", "dit": "loaded"}


def test_models_lists_devices_and_weights(client):
    models = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
    assert models["adain"]["loaded"] and models["adain"]["devices"] == ["cpu"]
    assert models["adain"]["details"]["weight_files"] == ["vgg.pth"]  # no host path
    assert models["dit"]["error"] is None


def _missing(search_path, device):
    raise FileNotFoundError("vgg_normalised.pth not found in /nowhere")


def test_missing_weights_mean_not_loaded_not_a_crash(fakes):
    entries = fakes.entries() | {"adain": ModelEntry("adain", _missing, run_stylize)}
    app = create_app(make_settings(), model_entries=entries)
    with TestClient(app, raise_server_exceptions=False) as client:
        models = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
        assert not models["adain"]["loaded"]
        assert "vgg_normalised.pth" in models["adain"]["error"]
        assert models["dit"]["loaded"]
        ready = client.get("/readyz")
        assert ready.status_code == 200  # dit still serves
        assert "vgg_normalised.pth" in ready.json()["models"]["adain"]
        response = client.post(
            "/v1/stylize",
            files=[("content", corpus.png()), ("style", corpus.png(seed=1))],
        )
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "model_not_loaded"


def test_nothing_loaded_is_not_ready(fakes):
    app = create_app(make_settings(load_models="adain"), model_entries={})
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "not_ready"
        assert client.get("/healthz").status_code == 200


def test_metrics_count_requests_and_batches(client):
    client.post("/v1/generate", json={"prompt": "x", "seed": 1})
    client.get("/v1/nope")
    text = client.get("/metrics").text
    assert (
        'atelier_http_requests_total{key="anonymous",method="POST",route="/v1/generate",'
        'status="200"} 1.0' in text
    )
    assert 'route="unmatched",status="404"' in text
    assert 'atelier_batch_size_count{device="cpu",model="dit"} 1.0' in text
    assert 'atelier_queue_depth{device="cpu",model="adain",priority="background"} 0.0' in text
    assert 'atelier_queue_depth{device="cpu",model="adain",priority="interactive"} 0.0' in text


def test_unknown_path_uses_the_envelope(client):
    response = client.get("/v1/nope")
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "Not Found"}}


def test_wrong_method_lists_every_method_of_the_path(client):
    """A path served by one route per method (GET and DELETE of a job) answers 405 with
    all of them in ``Allow``, not only the first route's."""
    response = client.request("OPTIONS", "/v1/jobs/abc")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert set(response.headers["allow"].split(", ")) == {"GET", "DELETE"}


def test_openapi_and_docs(client):
    schema = client.get("/openapi.json").json()
    assert {"/v1/stylize", "/v1/generate", "/v1/models", "/healthz", "/readyz"} <= set(
        schema["paths"]
    )
    assert client.get("/docs").status_code == 200


def test_page_and_its_assets(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert 'id="stylize-form"' in page.text and 'id="generate-form"' in page.text
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/style.css").status_code == 200


@pytest.mark.parametrize(
    ("header", "status"),
    [
        (None, 401),
        ("Bearer wrong", 401),
        ("Basic s3cret", 401),
        ("Bearer s3cret", 200),
    ],
)
def test_api_key_guards_v1_routes(client_factory, header, status):
    client = client_factory(api_key="s3cret")
    headers = {"Authorization": header} if header else {}
    response = client.get("/v1/models", headers=headers)
    assert response.status_code == status
    if status == 401:
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert client.get("/healthz").status_code == 200  # probes stay open


def test_api_key_guards_stylize_before_reading_images(client_factory):
    client = client_factory(api_key="s3cret")
    response = client.post("/v1/generate", json={"prompt": "a"})
    assert response.status_code == 401


def test_cors_is_off_by_default(client):
    response = client.get("/healthz", headers={"Origin": "https://example.org"})
    assert "access-control-allow-origin" not in response.headers


def test_cors_when_configured(client_factory):
    client = client_factory(cors_origins=["https://app.example.org"])
    allowed = client.options(
        "/v1/generate",
        headers={
            "Origin": "https://app.example.org",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "Authorization, Content-Type",
        },
    )
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://app.example.org"
    other = client.get("/healthz", headers={"Origin": "https://evil.example.com"})
    assert "access-control-allow-origin" not in other.headers


def test_graceful_shutdown_finishes_in_flight_and_refuses_new(fakes):
    app = create_app(make_settings(max_batch_wait_ms=0.0), model_entries=fakes.entries())
    with TestClient(app, raise_server_exceptions=False) as client:
        model = fakes.adain["cpu"]
        model.gate = threading.Event()
        files = [("content", corpus.png()), ("style", corpus.png(seed=1))]
        result = {}
        worker = threading.Thread(
            target=lambda: result.update(r=client.post("/v1/stylize", files=files))
        )
        worker.start()
        assert model.entered.wait(10)  # the request is inside the model
        app.state.lifecycle.begin_drain()
        refused = client.post("/v1/generate", json={"prompt": "late"})
        ready = client.get("/readyz")
        model.gate.set()
        worker.join(10)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "shutting_down"
    assert ready.status_code == 503
    assert result["r"].status_code == 200  # the one in flight finished


def test_deadline_answers_504(client_factory, fakes):
    client = client_factory(request_timeout_s=0.05, max_batch_wait_ms=0.0)
    model = fakes.adain["cpu"]
    model.gate = threading.Event()
    try:
        response = client.post(
            "/v1/stylize", files=[("content", corpus.png()), ("style", corpus.png(seed=1))]
        )
    finally:
        model.gate.set()
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "deadline_exceeded"


def test_full_queue_answers_429_with_retry_after(client_factory, fakes):
    client = client_factory(queue_size=1, max_batch_size=1, max_batch_wait_ms=0.0)
    model = fakes.adain["cpu"]
    model.gate = threading.Event()
    files = [("content", corpus.png()), ("style", corpus.png(seed=1))]
    outcomes = []
    threads = [
        threading.Thread(target=lambda: outcomes.append(client.post("/v1/stylize", files=files)))
        for _ in range(2)
    ]
    threads[0].start()
    assert model.entered.wait(10)  # first request in the forward
    threads[1].start()  # second one queues (queue_size=1)
    pool = client.app.state.pools["adain"]
    batcher = pool.batchers["cpu"]["interactive"]
    for _ in range(1000):
        if batcher.queued == 1:
            break
        threading.Event().wait(0.01)
    overloaded = client.post("/v1/stylize", files=files)
    model.gate.set()
    for thread in threads:
        thread.join(10)
    assert overloaded.status_code == 429
    assert int(overloaded.headers["Retry-After"]) >= 1
    assert overloaded.json()["error"]["code"] == "overloaded"
    assert sorted(r.status_code for r in outcomes) == [200, 200]

"""Fixtures: apps built around the fake models of ``service_fakes``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from service_fakes import Fakes, make_settings, served

from service.app import create_app
from service.config import PROJECT_WEIGHTS_DIR


@pytest.fixture
def fakes() -> Fakes:
    return Fakes()


@pytest.fixture
def client(fakes):
    app = create_app(make_settings(), model_entries=fakes.entries())
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def client_factory(fakes):
    """Build a client for custom settings; closed at teardown."""
    opened = []

    def build(**overrides) -> TestClient:
        app = create_app(make_settings(**overrides), model_entries=fakes.entries())
        test_client = TestClient(app, raise_server_exceptions=False)
        test_client.__enter__()
        opened.append(test_client)
        return test_client

    yield build
    for test_client in opened:
        test_client.__exit__(None, None, None)


@pytest.fixture(scope="session")
def real_models_url():
    """uvicorn serving the real AdaIN and DiT with small limits (``max_side`` 64), once a
    session; skips without the VGG weights in ATELIER_WEIGHTS_DIR or the DiT checkpoint."""
    weights = os.environ.get("ATELIER_WEIGHTS_DIR")
    if not weights or not (Path(weights) / "vgg19-normalised").is_dir():
        pytest.skip("needs the pretrained VGG weights in ATELIER_WEIGHTS_DIR")
    if not (PROJECT_WEIGHTS_DIR / "dit-shapes32.safetensors").is_file():
        pytest.skip("needs weights/dit-shapes32.safetensors")
    settings = make_settings(weights_dir=Path(weights), max_side=64, max_batch_wait_ms=0.0)
    app = create_app(settings)
    with served(app) as url:
        assert set(app.state.pools) == {"adain", "dit"}, app.state.model_status
        yield url


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """One real redis-server for the session; tests keep apart by key prefix."""
    from redis_server import RedisMissing, RedisServer

    try:
        server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    except RedisMissing as exc:
        pytest.skip(str(exc))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server():
    """One real S3-protocol server (moto's) for the session; tests keep apart by bucket."""
    from s3_server import S3Server

    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture
def s3_credentials(monkeypatch):
    """The standard AWS variables set to what the test server accepts."""
    from s3_server import CREDENTIALS

    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)

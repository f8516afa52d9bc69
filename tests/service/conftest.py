"""Fixtures: apps built around the fake models of ``service_fakes``."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from service_fakes import Fakes, make_settings

from service.app import create_app


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

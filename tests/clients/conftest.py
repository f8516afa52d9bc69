"""Fixtures for the client's tests: a real server (uvicorn on 127.0.0.1) around the fake
models of ``tests/service/service_fakes.py``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))  # service_fakes

from service_fakes import Fakes, make_settings, served  # noqa: E402

from service.app import create_app  # noqa: E402


@dataclass
class FakeServer:
    url: str
    fakes: Fakes
    hold: Path  # while this file exists, the fakes wait before each step after their first


@pytest.fixture(scope="module")
def fake_server(tmp_path_factory) -> Iterator[FakeServer]:
    """A server with the fake models, prints up to 2048 px, and videos."""
    hold = tmp_path_factory.mktemp("hold") / "hold"
    fakes = Fakes(hold=hold)
    settings = make_settings(max_side=2048, max_upload_bytes=8 * 1024 * 1024)
    with served(create_app(settings, model_entries=fakes.entries())) as url:
        yield FakeServer(url, fakes, hold)

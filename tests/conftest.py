"""Fixtures shared by every test folder."""

from __future__ import annotations

import http.server
import os
import shutil
import tempfile
import threading

import pytest

_RUN_TEMP = "_atelier_run_temp"


def pytest_configure(config: pytest.Config) -> None:
    """Every temporary file of the run goes in one folder removed when the run ends: the
    job stores the fakes and the servers started as processes make (``TMPDIR`` reaches
    them), Redis's and Chromium's. Left in ``/tmp``, 7,942 job stores had piled up here
    (1.1 GB), beside 10.6 GB the benchmarks' servers had left."""
    folder = tempfile.mkdtemp(prefix="atelier-tests-")
    setattr(config, _RUN_TEMP, (folder, os.environ.get("TMPDIR"), tempfile.tempdir))
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder, environ_before, tempdir_before = getattr(config, _RUN_TEMP)
    if environ_before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = environ_before
    tempfile.tempdir = tempdir_before
    shutil.rmtree(folder, ignore_errors=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib name)
        pass


@pytest.fixture
def http_root(tmp_path):
    """A folder served over HTTP on 127.0.0.1 by a thread; yields ``(folder, base_url)``."""
    root = tmp_path / "served"
    root.mkdir()

    class Handler(_QuietHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture(scope="session")
def emoji_font():
    """The emoji font's path (the things world, the judge); tests that draw emoji skip
    with the install hint without it."""
    from models.things.render import FontMissingError, font_path

    try:
        return font_path()
    except FontMissingError as error:
        pytest.skip(str(error))

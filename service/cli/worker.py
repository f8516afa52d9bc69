"""``atelier worker``: a worker alone, taking jobs from the shared job store.

The GPU tier of a deployment: it loads the models (``ATELIER_LOAD_MODELS``), claims their
jobs from the store (``ATELIER_REDIS_URL``; the SQLite store under ``ATELIER_STATE_DIR``
works for workers on the same host), runs them, and writes the results; the API tier
(``atelier serve`` with ``ATELIER_LOAD_MODELS=`` empty) takes the requests. Its HTTP port
answers only the probes (``/healthz``, ``/readyz``) and ``/metrics``. On SIGTERM it stops
claiming, finishes what it runs within ``shutdown_timeout_s``, and hands the rest back.
"""

from __future__ import annotations

import argparse

from service.cli.serve import add_malloc_flag, tune_glibc_malloc
from service.cli.settings import add_settings_command, settings_from_args


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_settings_command(
        subparsers,
        "worker",
        run,
        help="run a worker alone: take jobs from the shared job store",
        doc=__doc__,
    )
    add_malloc_flag(parser)


def run(args: argparse.Namespace) -> int:
    from service.app import configure_logging, create_app
    from service.cli.serve import serve_app

    settings = settings_from_args(args)
    configure_logging(settings.log_level)
    if not args.no_malloc_tuning:
        tune_glibc_malloc()
    serve_app(create_app(settings, api=False), settings)
    return 0

"""``atelier serve``: run the HTTP service under uvicorn.

Every setting is a flag (``service.cli.settings``) that overrides the ``ATELIER_*``
environment (and ``.env``); anything not given keeps its setting. On SIGINT/SIGTERM the
probes report not ready at once; for ``drain_grace_s`` (0 by default; set it behind a
load balancer to its health-check interval) new requests are still served, so the
balancer takes the replica out of rotation before anyone is refused. Then the app
drains: new work gets 503 ``shutting_down`` while reads of jobs are answered, until the
requests in flight have finished and the running jobs have finished or been handed back
to the queue, or ``shutdown_timeout_s`` has passed; then uvicorn stops listening and the
process exits at once (an interpreter's own teardown took 4-11 s here, and everything
worth keeping is in the job store by then). A second SIGINT stops at once.

Slow clients: a request head must arrive within ``header_timeout_s``
(``service.protocol``), a body within ``body_timeout_s`` (``service.app``), idle
keep-alive connections close after ``keep_alive_timeout_s``, and beyond
``max_connections`` open connections a request gets 503.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import time
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp

from service.cli.settings import add_setting_flags, settings_from_args
from service.config import Settings
from service.protocol import HeadTimeoutProtocol

if TYPE_CHECKING:
    from service.app import Lifecycle

logger = logging.getLogger("atelier.serve")

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the HTTP service (and a worker for the models that load here)",
        description="Serve style transfer and text-to-image over HTTP (uvicorn). The "
        "models that load here also take jobs from the job store; with "
        "ATELIER_LOAD_MODELS empty the replica serves the API alone (see atelier worker).",
    )
    add_setting_flags(parser)
    add_malloc_flag(parser)
    parser.set_defaults(func=run)


def add_malloc_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-malloc-tuning",
        action="store_true",
        help="leave glibc malloc at its defaults (see tune_glibc_malloc)",
    )


def tune_glibc_malloc() -> bool:
    """Keep freed memory in the process instead of handing it back to the kernel.

    A batched forward on the CPU allocates activations of hundreds of MB (8 x 64 x 256 x
    256 floats is 134 MB). glibc serves blocks that large with ``mmap`` and returns them
    with ``munmap``, so every forward page-faults its activations in afresh: measured
    here, that system time ate the whole gain of batching. One arena (the forward runs
    on a worker thread, whose arena would ``mmap`` regardless), no ``mmap`` for large
    blocks and a 1 GiB trim threshold make freed activations reusable by the next
    forward. The cost: the process keeps its peak memory. Returns ``False`` (and does
    nothing) where the C library is not glibc.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    applied = [
        mallopt(_M_ARENA_MAX, 1),
        mallopt(_M_MMAP_MAX, 0),
        mallopt(_M_TRIM_THRESHOLD, 1 << 30),
    ]
    return all(result == 1 for result in applied)


class DrainingServer(uvicorn.Server):
    """A uvicorn server that drains before it stops listening.

    The first stop signal makes the app leave (not ready, still serving) for
    ``drain_grace_s``, then drain (new requests get 503); the server keeps accepting
    connections until no request is in flight or ``drain_timeout_s`` has passed, and
    only then starts uvicorn's shutdown, which closes the listening sockets. A signal
    after the first goes to uvicorn at once.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        lifecycle: Lifecycle,
        *,
        drain_timeout_s: float,
        drain_grace_s: float = 0.0,
    ) -> None:
        super().__init__(config)
        self._lifecycle = lifecycle
        self._drain_timeout_s = drain_timeout_s
        self._drain_grace_s = drain_grace_s
        self._drain_start: float | None = None
        self._drain_deadline: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._drain_start is not None:
            super().handle_exit(sig, frame)
            return
        self._lifecycle.begin_leaving()
        self._drain_start = time.monotonic() + self._drain_grace_s
        self._drain_deadline = self._drain_start + self._drain_timeout_s

    async def on_tick(self, counter: int) -> bool:
        if self._drain_start is not None and not self.should_exit:
            if time.monotonic() < self._drain_start:
                return await super().on_tick(counter)
            self._lifecycle.begin_drain()
            drained = self._lifecycle.in_flight == 0 and not self._lifecycle.busy
            deadline = self._drain_deadline or 0.0
            if drained or time.monotonic() >= deadline:
                logger.info("drain over; closing the listening sockets", extra={"drained": drained})
                self.should_exit = True
        return await super().on_tick(counter)


def uvicorn_config(app: ASGIApp, settings: Settings) -> uvicorn.Config:
    """The uvicorn configuration for ``settings``: address, timeouts, connection cap."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        # uvicorn calls ``http`` as a protocol class; a partial of one works as one
        http=partial(HeadTimeoutProtocol, header_timeout_s=settings.header_timeout_s),  # type: ignore[arg-type]
        timeout_keep_alive=settings.keep_alive_timeout_s,  # type: ignore[arg-type]
        limit_concurrency=settings.max_connections,
        log_level=settings.log_level,
        access_log=False,  # the app writes one structured line per request
        timeout_graceful_shutdown=5,  # the drain above already waited for the work
    )


def run(args: argparse.Namespace) -> int:
    from service.app import configure_logging, create_app

    settings = settings_from_args(args)
    configure_logging(settings.log_level)
    if not args.no_malloc_tuning:
        logger.info("glibc malloc tuned for large reusable blocks: %s", tune_glibc_malloc())
    serve_app(create_app(settings), settings)
    return 0


def serve_app(app: FastAPI, settings: Settings) -> None:
    """Serve ``app`` under uvicorn with the drain on stop signals and the keys file
    re-read on SIGHUP (``atelier serve``, ``atelier worker``)."""
    server = DrainingServer(
        uvicorn_config(app, settings),
        app.state.lifecycle,
        drain_timeout_s=settings.shutdown_timeout_s,
        drain_grace_s=settings.drain_grace_s,
    )
    signal.signal(signal.SIGHUP, lambda signum, frame: app.state.keys.reload())
    server.run()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if server.started else 3)  # 3: uvicorn's code for a failed startup

"""``atelier check-config``: read the settings as ``atelier serve`` would, and say what is wrong.

For CI and Kubernetes init containers: the same environment (``ATELIER_*``, a ``.env``
file) and flags as ``serve`` and ``worker``; exit 0 with a short summary when every
setting is valid, exit 2 with one line per bad setting (the variable, its value shown
safely, what is expected) otherwise. ``serve`` and ``worker`` check the same way at
startup and exit the same way, without a traceback.
"""

from __future__ import annotations

import argparse

from service.cli.settings import add_settings_command, settings_from_args


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_settings_command(
        subparsers,
        "check-config",
        run,
        help="check the settings (environment and flags) as serve and worker read them",
        doc=__doc__,
    )


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)  # exits 2 with the bad settings listed
    store = "redis" if settings.redis_url else f"sqlite under {settings.state_dir}"
    blobs = (
        f"s3 bucket {settings.blob_s3_bucket} ({settings.blob_s3_endpoint_url or 'AWS'})"
        if settings.blob_store == "s3"
        else f"files in {settings.blob_folder()}"
    )
    print(
        f"configuration ok: models {settings.load_models or '(none)'} on {settings.devices}, "
        f"job store {store}, big results as {blobs}, port {settings.port}"
    )
    return 0

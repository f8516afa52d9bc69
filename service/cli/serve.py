"""``atelier serve``: run the HTTP service (placeholder until the service lands)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the HTTP service")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("The HTTP service is not built yet (see issue 4); `make test` works today.")
    return 1

"""``atelier keys add|list|revoke --file F``: the named API keys of a server.

Examples::

    atelier keys add alice --max-jobs 16 --rate 2 --file /etc/atelier/keys.json
    atelier keys list --file /etc/atelier/keys.json
    atelier keys revoke alice --file /etc/atelier/keys.json

``add`` prints the new key once; the file keeps only its SHA-256 (``service.keys``). A
server started with ``ATELIER_API_KEYS_FILE`` pointing at the file sees every change
without a restart. ``--file`` defaults to ``ATELIER_API_KEYS_FILE``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from service.cli import add_documented_parser
from service.cli.settings import settings_from_args
from service.keys import KeyFile


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_documented_parser(
        subparsers, "keys", help="make, list and revoke named API keys", doc=__doc__
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="make a key; prints it once")
    add.add_argument("name", help="the key's name (shown in jobs, logs and metrics)")
    add.add_argument("--max-jobs", type=int, help="unfinished async jobs it may hold")
    add.add_argument("--rate", type=float, help="requests per second it may send")
    listing = actions.add_parser("list", help="the keys, without secrets")
    revoke = actions.add_parser("revoke", help="refuse a key from now on")
    revoke.add_argument("name")
    for sub in (add, listing, revoke):
        sub.add_argument("--file", type=Path, help="the keys file (ATELIER_API_KEYS_FILE)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = args.file or settings_from_args(args).api_keys_file
    if path is None:
        print("atelier keys: give --file or set ATELIER_API_KEYS_FILE", file=sys.stderr)
        return 2
    keys = KeyFile(path)
    try:
        if args.action == "add":
            token = keys.add(args.name, max_jobs=args.max_jobs, rate=args.rate)
            print(token)
            print(
                f"key {args.name!r} added to {path}; it is shown only now: keep it",
                file=sys.stderr,
            )
        elif args.action == "revoke":
            keys.revoke(args.name)
            print(f"key {args.name!r} revoked", file=sys.stderr)
        else:
            for key in keys.read():
                limits = f"max_jobs={key.max_jobs or 'default'} rate={key.rate or 'default'}"
                state = "revoked" if key.revoked else "active"
                print(f"{key.name}\t{state}\t{limits}\tcreated {key.created_at}")
    except ValueError as exc:
        print(f"atelier keys: {exc}", file=sys.stderr)
        return 2
    return 0

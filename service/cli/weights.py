"""``atelier weights list | verify | fetch NAME``: the checkpoints in weights/manifest.json.

Files are looked up in ``Settings.weight_search_path()`` (``ATELIER_WEIGHTS_DIR``, then
the repository's ``weights/``); ``fetch`` downloads into ``ATELIER_WEIGHTS_DIR`` (or
``--dest``), sha256-checked and atomically.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from models.hub import ChecksumError, Manifest, fetch, status
from service.cli.settings import settings_from_args


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "weights",
        help="list, verify or download checkpoints",
        description="Known checkpoints (weights/manifest.json): list, verify sha256, fetch.",
    )
    parser.add_argument("--manifest", type=Path, default=None, help="manifest to use")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="every checkpoint and file, and where it was found")
    actions.add_parser("verify", help="check the sha256 of every file found (exit 1 on mismatch)")
    fetch_parser = actions.add_parser("fetch", help="download a checkpoint's missing files")
    fetch_parser.add_argument("name", help="checkpoint name, as `atelier weights list` shows")
    fetch_parser.add_argument("--dest", type=Path, default=None, help="folder to download into")
    fetch_parser.add_argument(
        "--allow-unpinned",
        action="store_true",
        help="also download files the manifest has no sha256 for",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    manifest = Manifest.load(args.manifest) if args.manifest else Manifest.load()
    search_path = settings.weight_search_path()
    if args.action == "fetch":
        return _fetch(manifest, args, settings.weights_dir, search_path)
    rows = status(manifest, search_path, check=args.action == "verify")
    mismatches = 0
    for checkpoint in manifest:
        print(f"{checkpoint.name}  [{checkpoint.license}]  {checkpoint.description}")
        for row in (r for r in rows if r.checkpoint == checkpoint.name):
            size = f"{row.file.size:>10,d} B" if row.file.size else " " * 12
            if row.location is None:
                state = "missing"
            elif row.sha256_ok is False:
                state = f"SHA256 MISMATCH at {row.location}"
                mismatches += 1
            elif row.sha256_ok:
                state = f"ok at {row.location}"
            else:
                state = f"found at {row.location}"
            print(f"  {row.file.path:<50} {size}  {state}")
    print("searched: " + ", ".join(str(folder) for folder in search_path))
    return 1 if mismatches else 0


def _fetch(
    manifest: Manifest, args: argparse.Namespace, weights_dir: Path, search_path: list[Path]
) -> int:
    destination = args.dest or weights_dir
    try:
        paths = fetch(
            manifest,
            args.name,
            destination,
            search_path=search_path,
            allow_unpinned=args.allow_unpinned,
        )
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    except (ChecksumError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0

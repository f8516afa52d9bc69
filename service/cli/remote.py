"""``atelier stylize|generate --server URL``: the same commands run by a remote service
through ``atelier-client`` (``clients/python``), with the same progress bars.

``--server`` defaults to ``ATELIER_SERVER``; the key is ``--api-key`` or
``ATELIER_API_KEY``. The work is sent as a job and followed on its event stream (a bar
of passes, a print's tiles, a video's frames or sampler steps); the result is written a
chunk at a time (a video resumes with ``Range`` if the connection breaks). Flags that
name something on this machine (``--device``, ``--checkpoint``, ``--levels``) have no
meaning there and are refused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.cli.common import SAMPLING_FLAGS, given_options, print_understanding

if TYPE_CHECKING:
    from atelier_client import Client

#: What an output's suffix asks of the server's ``format`` field.
FORMATS = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".webp": "webp"}


def _client(args: argparse.Namespace) -> Client:
    try:
        from atelier_client import Client
    except ImportError:
        raise SystemExit(
            "error: --server needs atelier-client: pip install -e clients/python"
        ) from None
    return Client(args.server, api_key=args.api_key)


def _refuse_local_flags(args: argparse.Namespace, *names: str) -> None:
    given = [f"--{name}" for name in names if getattr(args, name, None) is not None]
    if given:
        raise SystemExit(f"error: {', '.join(given)} name this machine; not with --server")


def _bar() -> Any:
    from atelier_client import ProgressBar

    return ProgressBar(file=sys.stderr)


def stylize(args: argparse.Namespace) -> int:
    """``atelier stylize ... --server URL``."""
    from atelier_client import AtelierError

    _refuse_local_flags(args, "device", "levels")
    named = ("alpha", "preserve_color", "preset", "style_scale", "style_weights", "size", "quality")
    options = given_options(args, {flag: flag for flag in named})
    suffix = args.output.suffix.lower()
    if suffix in FORMATS:
        options["format"] = FORMATS[suffix]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    try:
        with _client(args) as client:
            content = Path(args.content).read_bytes()
            client.stylize(
                content,
                list(args.styles),
                masks=args.masks,
                bar=_bar(),
                output=args.output,
                **options,
            )
    except (AtelierError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(args.output)
    return 0


def generate(args: argparse.Namespace) -> int:
    """``atelier generate ... --server URL``."""
    from atelier_client import AtelierError

    _refuse_local_flags(args, "device", "checkpoint")
    if args.num_images < 1:
        raise SystemExit("error: -n must be >= 1")
    flags = {**SAMPLING_FLAGS, "seed": "seed", "negative": "negative_prompt"}
    options = {"num_images": args.num_images, "plan_layout": args.plan_layout}
    options |= given_options(args, flags)
    try:
        with _client(args) as client:
            result = client.generate(args.prompt, bar=_bar(), **options)
    except AtelierError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print_understanding(result.understood, result.ignored, result.not_learned)
    args.output.mkdir(parents=True, exist_ok=True)
    for seed, data in zip(result.seeds, result.images, strict=True):
        path = args.output / f"seed{seed}.png"
        path.write_bytes(data)
        print(path)
    return 0

"""What ``atelier generate`` and ``atelier stylize`` share, run here or on a service
(``--server``, :mod:`service.cli.remote`): where they run, generate's sampling flags and
how the prompt's reading is reported."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: generate's sampling flags and the option each sets; an unset flag leaves the model's.
SAMPLING_FLAGS = {"steps": "steps", "guidance": "guidance_scale", "sampler": "sampler"}


def add_where_to_run(
    parser: argparse.ArgumentParser,
    here: Callable[[argparse.Namespace], int],
    there: Callable[[argparse.Namespace], int],
) -> None:
    """``--device`` for a run on this machine and ``--server``/``--api-key`` for a run
    on a service; the command runs ``there`` when ``--server`` is given, else ``here``."""
    parser.add_argument("--device", help="torch device (default: the first of ATELIER_DEVICES)")
    parser.add_argument(
        "--server",
        default=os.environ.get("ATELIER_SERVER") or None,
        metavar="URL",
        help="run on this Atelier service instead of here (default: ATELIER_SERVER); "
        "needs atelier-client (pip install clients/python)",
    )
    parser.add_argument(
        "--api-key", help="the service's API key (default: ATELIER_API_KEY)", default=None
    )
    parser.set_defaults(func=lambda args: there(args) if args.server else here(args))


def given_options(args: argparse.Namespace, flags: Mapping[str, str]) -> dict[str, Any]:
    """The options that the ``flags`` given on the command line set (``flag -> option``),
    without the flags left unset."""
    given = {option: getattr(args, flag) for flag, option in flags.items()}
    return {option: value for option, value in given.items() if value is not None}


def print_understanding(
    understood: str | None, ignored: Sequence[str], not_learned: Sequence[str]
) -> None:
    """Say on stderr what the prompt was read as, which of its words were not used, and
    which things it names the model never learned to draw."""
    if understood is None:
        print("understood: nothing; drawn as typed", file=sys.stderr)
    else:
        print(f"understood: {understood}", file=sys.stderr)
    if ignored:
        print(f"ignored: {', '.join(ignored)}", file=sys.stderr)
    if not_learned:
        print(
            f"not learned by this model: {', '.join(not_learned)} (drawn as typed; the "
            "images will not show them)",
            file=sys.stderr,
        )

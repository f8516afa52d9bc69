"""The ``atelier`` command line.

Each sub-command lives in its own module under ``service/cli/`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable taking
the parsed ``argparse.Namespace`` and returning an exit code.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

ConfigT = TypeVar("ConfigT", bound="DataclassInstance")

#: Sub-command modules, in the order ``atelier --help`` lists them.
COMMAND_MODULES = (
    "serve",
    "worker",
    "check_config",
    "keys",
    "stylize",
    "generate",
    "weights",
    "train_adain",
    "train_dit",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atelier", description="Style transfer and text-to-image, from the command line."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:  # a module that fails to import fails the command line
        importlib.import_module(f"service.cli.{name}").register(subparsers)
    return parser


def add_documented_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    *,
    help: str,
    doc: str | None,
) -> argparse.ArgumentParser:
    """Add the sub-command ``name`` whose ``--help`` description is ``doc`` (its module's
    docstring) past the first paragraph, laid out as written."""
    return subparsers.add_parser(
        name,
        help=help,
        description=(doc or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def config_from_flags(config: type[ConfigT], args: argparse.Namespace, **given: Any) -> ConfigT:
    """The dataclass ``config`` from the flags named after its fields (``--batch-size``
    for ``batch_size``), with ``given`` on top; a field without a flag keeps its default."""
    names = {f.name for f in dataclasses.fields(config) if f.init}
    flags = {name: value for name, value in vars(args).items() if name in names}
    return config(**(flags | given))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

"""Settings as command-line flags: one flag per ``Settings`` field, made from the model.

``atelier serve`` and ``atelier worker`` take every setting as a flag
(``max_batch_size`` -> ``--max-batch-size``), with the field's description as its help;
a flag overrides the ``ATELIER_*`` environment. Values are parsed by the settings model
itself, so a flag and its environment variable accept the same text (a list as JSON or
comma-separated, a boolean as ``--flag`` / ``--no-flag``). Every command that needs
settings builds them with :func:`settings_from_args`, so there is one path from the
environment and the flags to a ``Settings``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import typing
from collections.abc import Callable, Collection
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import SettingsError

from service.cli import add_documented_parser
from service.config import Settings

_DEST = "setting__"


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(annotation) is list


def _description(field: FieldInfo) -> str | None:
    """A setting's description on one line (its docstring in ``service/config.py`` is
    wrapped to the source's width)."""
    return " ".join(field.description.split()) if field.description else None


def _list_value(text: str) -> list[str]:
    """A list flag: a JSON list, or comma-separated words."""
    if text.lstrip().startswith("["):
        return [str(item) for item in json.loads(text)]
    return [item.strip() for item in text.split(",") if item.strip()]


def add_settings_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    run: Callable[[argparse.Namespace], int],
    *,
    help: str,
    doc: str | None,
) -> argparse.ArgumentParser:
    """Add the sub-command ``name`` that reads the settings: its documented parser
    (:func:`~service.cli.add_documented_parser`) with every setting flag, running ``run``."""
    parser = add_documented_parser(subparsers, name, help=help, doc=doc)
    add_setting_flags(parser)
    parser.set_defaults(func=run)
    return parser


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per ``Settings`` field (see the module docstring)."""
    group = parser.add_argument_group(
        "settings", "each overrides its ATELIER_* environment variable (service/config.py)"
    )
    for name, field in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        default = field.get_default(call_default_factory=True)
        help_text = f"{_description(field) or name} (default: {default!r})".replace("%", "%%")
        if field.annotation is bool:
            group.add_argument(
                flag, dest=_DEST + name, action=argparse.BooleanOptionalAction, help=help_text
            )
        elif _is_list(field.annotation):
            group.add_argument(
                flag, dest=_DEST + name, metavar="LIST", type=_list_value, help=help_text
            )
        else:
            group.add_argument(flag, dest=_DEST + name, metavar=name.upper(), help=help_text)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The environment's settings with every given flag applied on top.

    A value the settings refuse ends the program with the field's error (exit 2).
    """
    overrides = {
        key.removeprefix(_DEST): value
        for key, value in vars(args).items()
        if key.startswith(_DEST) and value is not None
    }
    try:
        return Settings(**overrides)
    except (ValidationError, SettingsError) as exc:
        for line in problems(exc, flags=set(overrides)):
            print(f"atelier: {line}", file=sys.stderr)
        raise SystemExit(2) from None


#: Fields whose values are never echoed (a URL's password is masked instead).
SECRET_FIELDS = {"api_key", "webhook_secret"}


def shown(name: str, value: object) -> str:
    """A setting's value as an error line may show it: secrets hidden, URLs without their
    password, long text shortened."""
    if name in SECRET_FIELDS:
        return "(hidden)"
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", text)
    return repr(text if len(text) <= 60 else text[:57] + "...")


def problems(error: ValidationError | SettingsError, *, flags: Collection[str] = ()) -> list[str]:
    """One line per bad setting: where it came from (``--flag`` or ``ATELIER_NAME``), its
    value shown safely, and what is expected (the field's own message and description)."""
    if isinstance(error, SettingsError):  # the environment's text could not be read at all
        found = re.search(r'field "?(\w+)"?', str(error))
        return [f"{_source(found.group(1) if found else '?', flags)}: {error}"]
    lines = []
    for item in error.errors():
        name = str(item["loc"][0]) if item["loc"] else "?"
        field = Settings.model_fields.get(name)
        description = _description(field) if field else None
        expected = f" (expected: {description})" if description else ""
        message = str(item["msg"]).removeprefix("Value error, ")
        value = shown(name, item.get("input"))
        lines.append(f"{_source(name, flags)}={value}: {message}{expected}")
    return lines


def _source(name: str, flags: Collection[str]) -> str:
    return "--" + name.replace("_", "-") if name in flags else "ATELIER_" + name.upper()

"""How ``service_faults.py`` and its scenario modules (``job_faults.py``,
``store_faults.py``) declare their scenarios' flags: each a titled ``FlagGroup`` of
``--name: (default, help)``, added to the one parser by ``service_faults.main``.

Imported as a sibling (run as scripts, this folder is on ``sys.path``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class FlagGroup:
    """A titled group of numeric flags, ``{"--name": (default, help)}``.

    A flag takes its type from its default (``int`` or ``float``); ``help`` may be None.
    """

    title: str
    flags: dict[str, tuple[int | float, str | None]]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group(self.title)
        for name, (default, help_) in self.flags.items():
            group.add_argument(name, type=type(default), default=default, help=help_)


__all__ = ["FlagGroup"]

"""Print the project's runtime requirements, one per line, read from ``pyproject.toml``.

The Docker image installs its dependencies in a layer of their own, built from
``pyproject.toml`` alone, so that editing the code does not reinstall torch::

    python deploy/requirements.py | pip install -r /dev/stdin
    pip install --no-deps -e .

The bare-metal install in docs/deployment.md runs the same two commands (a test checks it).
Extras are added by name: ``python deploy/requirements.py dev``.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(pyproject: Path = PYPROJECT, extras: tuple[str, ...] = ()) -> list[str]:
    """The ``[project] dependencies`` of ``pyproject``, then those of each extra, in order.

    Raises:
        ValueError: an extra that ``pyproject`` does not define.
    """
    with pyproject.open("rb") as file:
        project = tomllib.load(file)["project"]
    lines = list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            known = ", ".join(sorted(optional)) or "none"
            raise ValueError(f"unknown extra {extra!r} (pyproject.toml defines: {known})")
        lines.extend(optional[extra])
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extras", nargs="*", help="optional-dependency groups to add")
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT)
    args = parser.parse_args(argv)
    try:
        lines = requirements(args.pyproject, tuple(args.extras))
    except ValueError as exc:
        parser.error(str(exc))
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long a fresh process takes to start the project's commands, and what it imports.

Each case runs in a new interpreter (``sys.executable``, the repository as working
folder), the cases interleaved round by round; the figure is the median wall time of the
rounds. ``inflect`` is timed alone beside them, since every caption reader needs it and
its import alone takes seconds (typeguard instruments its functions as they are
defined). Each case also says whether it imported ``inflect``.

Usage:
    .venv/bin/python benchmarks/import_time.py              # 3 rounds
    .venv/bin/python benchmarks/import_time.py --rounds 5 --json

To compare with another tree, run it with ``PYTHONPATH`` set to that tree's folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: What each case runs; each prints whether ``inflect`` was imported by then.
_SAYS_INFLECT = "import sys; print('inflect' in sys.modules)"
CASES = {
    "import inflect": "import inflect; " + _SAYS_INFLECT,
    "atelier --help": (
        "import contextlib, io, sys; from service.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n" + _SAYS_INFLECT
    ),
    "import service.app": "import service.app; " + _SAYS_INFLECT,
    "read a prompt": (
        "from models.shapes.understand import understand; understand('two cats'); " + _SAYS_INFLECT
    ),
}


def run_once(code: str) -> tuple[float, bool]:
    """Wall seconds of one fresh interpreter running ``code``, and what it printed last."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    seconds = time.perf_counter() - started
    return seconds, done.stdout.strip().splitlines()[-1] == "True"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in CASES}
    imported: dict[str, bool] = {}
    for _ in range(args.rounds):
        for name, code in CASES.items():
            seconds, imported[name] = run_once(code)
            times[name].append(seconds)
    medians = {name: statistics.median(values) for name, values in times.items()}
    if args.json:
        print(json.dumps({"median_s": medians, "imports_inflect": imported, "runs": times}))
        return 0
    print(f"median of {args.rounds} fresh processes each, interleaved")
    for name, seconds in medians.items():
        print(f"  {name:<18} {seconds:6.2f} s   imports inflect: {imported[name]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

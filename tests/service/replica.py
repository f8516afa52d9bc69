"""A replica for the job tests: ``atelier serve`` (or ``atelier worker``) with the test
fakes, in a process of its own that a test can SIGTERM or SIGKILL.

    python tests/service/replica.py [serve|worker]

Settings come from the ``ATELIER_*`` environment as for ``atelier serve``;
``REPLICA_HOLD`` names a file: while it exists, the fake models wait before each step
after their first (the test holds a job mid-run from outside).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # service_fakes
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project

from service_fakes import Fakes  # noqa: E402

from service.app import configure_logging, create_app  # noqa: E402
from service.cli.serve import serve_app  # noqa: E402
from service.config import Settings  # noqa: E402


def main() -> None:
    role = sys.argv[1] if len(sys.argv) > 1 else "serve"
    settings = Settings(_env_file=None)
    configure_logging(settings.log_level)
    hold = os.environ.get("REPLICA_HOLD")
    fakes = Fakes(Path(hold) if hold else None)
    app = create_app(settings, model_entries=fakes.entries(), api=role == "serve")
    serve_app(app, settings)


if __name__ == "__main__":
    main()

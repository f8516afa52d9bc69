"""Container health probe: exit 0 when the service answers ``GET /healthz`` with 2xx, else 1.

Used by the Dockerfile's ``HEALTHCHECK`` and by docker-compose.yml, so that neither
needs curl in the image. The port comes from the service's own settings
(``ATELIER_PORT``); the probe always talks to the loopback interface, whatever
``ATELIER_HOST`` the server binds.

    python deploy/healthcheck.py            # probes /healthz (alive)
    python deploy/healthcheck.py /readyz    # probes /readyz (models loaded)
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request

from service.config import Settings

HEALTH_PATH = "/healthz"


def probe(port: int, path: str = HEALTH_PATH, timeout_s: float = 4.0) -> bool:
    """True when ``GET http://127.0.0.1:{port}{path}`` answers a 2xx status in time."""
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            healthy = 200 <= response.status < 300
    except (urllib.error.URLError, OSError) as exc:  # HTTPError (4xx/5xx) is a URLError
        print(f"unhealthy: GET {url}: {exc}", file=sys.stderr)
        return False
    if not healthy:
        print(f"unhealthy: GET {url}: status {response.status}", file=sys.stderr)
    return healthy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Probe the local Atelier service.")
    parser.add_argument("path", nargs="?", default=HEALTH_PATH)
    parser.add_argument("--timeout", type=float, default=4.0, help="seconds (default 4)")
    args = parser.parse_args(argv)
    if not args.path.startswith("/"):
        parser.error(f"path must start with '/': {args.path!r}")
    return 0 if probe(Settings().port, args.path, args.timeout) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The project's files one request passes through, counted as it runs.

One app in this process (CPU, real weights, the shipped settings but a temporary state
folder), one warm-up request, then the request again with a profile hook on every
thread (``sys.setprofile`` / ``threading.setprofile``, set before the app starts its
threads): a file counts when a function defined in it is called while the request is
in flight. Files under ``norms/``, ``models/`` and ``service/`` are counted. The same
hook then watches the app for as long again with no request in flight: the files
called then (the job store's health probe, the webhook outbox's poll) are background
work, shown apart and not counted for the request.

Usage:
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/request_files.py
    ATELIER_WEIGHTS_DIR=../shared/weights python benchmarks/request_files.py --kind generate
"""

from __future__ import annotations

import argparse
import collections
import io
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
from fastapi.testclient import TestClient
from PIL import Image

from service.app import create_app
from service.config import Settings

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("service", "models", "norms")


class FileCalls:
    """Counts calls per project file while ``recording`` is set (a profile hook)."""

    def __init__(self) -> None:
        self.recording = False
        self.calls: collections.Counter[str] = collections.Counter()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.recording or event != "call":
            return
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(REPO):
            relative = path.relative_to(REPO)
            if relative.parts[0] in LAYERS:
                self.calls[relative.as_posix()] += 1

    def record(self, work: Any) -> tuple[set[str], float]:
        """The files called while ``work()`` runs, and its seconds."""
        self.calls.clear()
        self.recording = True
        started = time.perf_counter()
        try:
            work()
        finally:
            self.recording = False
        return set(self.calls), time.perf_counter() - started


def png(side: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def request(client: TestClient, kind: str) -> None:
    if kind == "stylize":
        files = [("content", ("c.png", png(96, 0), "image/png"))]
        files.append(("style", ("s.png", png(64, 1), "image/png")))
        response = client.post("/v1/stylize", files=files, data={"size": "96"})
    else:
        response = client.post("/v1/generate", json={"prompt": "a red circle", "steps": 2})
    if response.status_code != 200:
        raise SystemExit(f"{kind}: {response.status_code} {response.text[:200]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("stylize", "generate"), default="stylize")
    args = parser.parse_args()
    weights = os.environ.get("ATELIER_WEIGHTS_DIR")
    if not weights:
        raise SystemExit("set ATELIER_WEIGHTS_DIR to the shared weights (../shared/weights)")
    hook = FileCalls()
    sys.setprofile(hook)
    threading.setprofile(hook)  # the app's threads start after this
    with tempfile.TemporaryDirectory(prefix="atelier-files-") as state:
        settings = Settings(
            devices="cpu",
            load_models="adain" if args.kind == "stylize" else "dit",
            weights_dir=Path(weights),
            state_dir=Path(state),
            _env_file=None,
        )
        with TestClient(create_app(settings)) as client:
            request(client, args.kind)  # warm-up: first forwards, lazy imports
            files, seconds = hook.record(lambda: request(client, args.kind))
            idle, _ = hook.record(lambda: time.sleep(max(seconds, 1.0)))
    counted = sorted(files - idle)
    for layer in LAYERS:
        names = [name for name in counted if name.startswith(f"{layer}/")]
        print(f"{layer}: {len(names)}")
        for name in names:
            print(f"  {name}")
    shared = sorted(files & idle)
    print(f"called in the request's window and with no request in flight too: {shared}")
    print(f"background only: {sorted(idle - files)}")
    layers = ", ".join(f"{layer} {sum(n.startswith(layer) for n in counted)}" for layer in LAYERS)
    print(
        f"{args.kind}: {len(counted)} files ({layers}); {len(shared)} more that background work calls"
    )


if __name__ == "__main__":
    main()

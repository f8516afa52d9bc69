"""``atelier serve`` in a subprocess on 127.0.0.1: the server the service benchmarks measure.

Imported by ``service_load.py`` and ``service_faults.py`` (run as scripts, their folder is
on ``sys.path``). The figures they report are read from outside the process: over HTTP,
from ``/metrics``, and from ``/proc/<pid>``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from models.devices import return_freed_memory

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------ figures and targets
#: the loaded/idle p95 ratio a valid request must stay under, in every fault scenario
LATENCY_RATIO_TARGET = 2.0


@dataclass
class Check:
    """One row of a benchmark's summary table."""

    scenario: str
    figure: str
    measured: str
    target: str
    met: bool


def p95(values: list[float]) -> float:
    return float(np.percentile(values, 95))


def latency_check(scenario: str, phase: str, idle: list[float], loaded: list[float]) -> Check:
    ratio = p95(loaded) / p95(idle)
    return Check(
        scenario,
        f"valid request p95 {phase} / idle",
        f"{p95(loaded):.3f} s / {p95(idle):.3f} s = {ratio:.2f}x",
        f"served, < {LATENCY_RATIO_TARGET:g}x",
        ratio < LATENCY_RATIO_TARGET,
    )


# ------------------------------------------------------------------ the process
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmRSS") / 1024


def peak_rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmHWM") / 1024


def reset_peak_rss(pid: int) -> None:
    """Linux >= 4.0: writing 5 to ``clear_refs`` resets ``VmHWM`` to the current RSS."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def forked_peak_growth(measure: Callable[[], float]) -> tuple[float, float]:
    """``(peak RSS growth, measure())`` in MB, ``measure`` run once in a forked child: its
    growth over the child's RSS before it. The parent's freed memory is given back first:
    pages it still held would be reused by the child without growing its RSS."""
    return_freed_memory()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: measure once, report, leave
        os.close(read)
        pid = os.getpid()
        before = rss_mb(pid)
        reset_peak_rss(pid)
        result = measure()
        os.write(write, f"{peak_rss_mb(pid) - before} {result}".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        growth, result = (float(value) for value in pipe.read().split())
    os.waitpid(child, 0)
    return growth, result


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


class Footprint:
    """What process ``pid`` takes from now on: its RSS now (``before_mb``, and the peak
    RSS reset to it), then on each call the peak's growth over it and the CPU seconds
    spent since."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before_mb = rss_mb(pid)
        reset_peak_rss(pid)
        self._cpu_s = cpu_seconds(pid)

    def growth_mb(self) -> float:
        return peak_rss_mb(self.pid) - self.before_mb

    def cpu_s(self) -> float:
        return cpu_seconds(self.pid) - self._cpu_s


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``atelier serve --devices cpu`` on a free port of 127.0.0.1, stopped with SIGTERM.

    Args:
        models: ``--load-models`` (``"adain"``, ``"dit"``, ``"adain,dit"``, ``""``: none,
            an API-only replica).
        weights_dir: ``--weights-dir`` (else ``ATELIER_WEIGHTS_DIR`` as for any server).
        max_batch_size, max_batch_wait_ms, queue_size, request_timeout_s: the CLI options
            of the same name (``max_batch_wait_ms=None`` keeps the shipped default).
        settings: more ``ATELIER_*`` settings by field name, e.g. ``{"max_image_steps": "8000"}``.
    """

    def __init__(
        self,
        *,
        models: str,
        weights_dir: Path | None = None,
        max_batch_size: int = 8,
        max_batch_wait_ms: float | None = None,
        queue_size: int = 64,
        request_timeout_s: float = 600.0,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable, "-m", "service.cli", "serve",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--devices", "cpu",
            "--load-models", models,
            "--max-batch-size", str(max_batch_size),
            "--queue-size", str(queue_size),
            "--request-timeout-s", str(request_timeout_s),
            "--log-level", "warning",
        ]  # fmt: skip
        if weights_dir is not None:
            command += ["--weights-dir", str(weights_dir)]
        if max_batch_wait_ms is not None:
            command += ["--max-batch-wait-ms", str(max_batch_wait_ms)]
        env = os.environ | {f"ATELIER_{k.upper()}": v for k, v in (settings or {}).items()}
        # a job store of its own, removed once the server is gone, unless the caller
        # shares one (a restart, replicas); a print's results are hundreds of MB
        self._own_state: tempfile.TemporaryDirectory | None = None
        if "ATELIER_STATE_DIR" not in env:
            self._own_state = tempfile.TemporaryDirectory(prefix="atelier-bench-")
            env["ATELIER_STATE_DIR"] = self._own_state.name
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Poll ``/readyz`` until 200 (the models are loaded)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server not ready in time")

    def kill(self) -> None:
        """SIGKILL: no drain, no hand-back (a crash)."""
        self.process.kill()
        self.process.wait()
        self._remove_own_state()

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._remove_own_state()

    def _remove_own_state(self) -> None:
        if self._own_state is not None:
            self._own_state.cleanup()

    def __enter__(self) -> Server:
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

"""``atelier serve``: flags over settings, and a real uvicorn process that stops cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx
import pytest
from live_server import ROOT, live_server

from service.cli import build_parser
from service.cli.settings import settings_from_args
from service.config import Settings


def test_flags_override_settings(monkeypatch):
    monkeypatch.setenv("ATELIER_MAX_BATCH_SIZE", "3")
    monkeypatch.setenv("ATELIER_PORT", "9999")
    args = build_parser().parse_args(
        ["serve", "--port", "8123", "--devices", "cpu", "--max-batch-wait-ms", "25"]
    )
    settings = settings_from_args(args)
    assert (settings.port, settings.devices, settings.max_batch_wait_ms) == (8123, "cpu", 25.0)
    assert settings.max_batch_size == 3  # not given as a flag: the environment's value


def test_bad_flag_value_is_rejected_naming_the_flag(capsys):
    args = build_parser().parse_args(["serve", "--port", "eighty"])
    with pytest.raises(SystemExit) as exit_info:
        settings_from_args(args)
    assert exit_info.value.code == 2
    assert "--port" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_every_setting_is_a_flag(command):
    parser = build_parser()
    flags = parser._subparsers._group_actions[0].choices[command]._option_string_actions
    for name in Settings.model_fields:
        assert "--" + name.replace("_", "-") in flags, name
    args = parser.parse_args(
        [
            command,
            "--webhook-allowed-hosts", "a.example, *.b.example",
            "--cors-origins", '["https://x.example"]',
            "--no-protect-metrics-and-docs",
            "--key-rate", "2.5",
            "--state-dir", "/tmp/somewhere",
        ]
    )  # fmt: skip
    settings = settings_from_args(args)
    assert settings.webhook_allowed_hosts == ["a.example", "*.b.example"]
    assert settings.cors_origins == ["https://x.example"]
    assert settings.protect_metrics_and_docs is False
    assert settings.key_rate == 2.5 and str(settings.state_dir) == "/tmp/somewhere"


@pytest.mark.timeout(60)
def test_real_server_answers_probes_and_stops_on_sigterm():
    with live_server() as server:
        health = httpx.get(f"{server.url}/healthz")
        assert health.json() == {"status": "ok"}
        ready = httpx.get(f"{server.url}/readyz")
        assert ready.status_code == 503  # "nothing" is not a model: not ready, not a crash
        assert "unknown model" in ready.json()["models"]["nothing"]
        server.process.send_signal(signal.SIGTERM)
        # uvicorn finishes its shutdown, then re-raises the signal it caught
        assert server.process.wait(timeout=30) in (0, -signal.SIGTERM)
        log = server.log()
        assert '"message": "workers stopped"' in log
        assert "Application shutdown complete" in log
        assert '"message": "draining: new work gets 503"' in log
        assert '"route": "/readyz", "status": 503' in log


_FAULTS_SCRIPT = """
import resource, sys, torch
from service.cli.serve import tune_glibc_malloc
if sys.argv[1] == "tuned":
    assert tune_glibc_malloc()
def faults_of_one_forward_sized_buffer():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffer = torch.ones(64 * 1024 * 1024 // 4)  # 64 MB, above glibc's largest mmap threshold
    del buffer
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults = [faults_of_one_forward_sized_buffer() for _ in range(16)]
print(sum(faults[8:]))  # the steady state: the heap's first rounds grow it (see the test)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_malloc_tuning_reuses_large_blocks_instead_of_faulting_them_in():
    """Steady-state page faults of a repeated 64 MB allocation, default vs tuned malloc.

    With the tuning, the first few rounds still grow the heap: torch allocates with
    ``posix_memalign``, which asks for a little more than the block it freed, and small
    allocations land beside freed blocks, so how many rounds it takes to have a hole
    that fits depends on the address layout (two to four rounds, measured). Hence the
    count over rounds 8..15 only, where a default malloc faults every page every round.
    """

    def page_faults(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", _FAULTS_SCRIPT, mode],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        return int(out.stdout.strip())

    default, tuned = page_faults("default"), page_faults("tuned")
    assert default >= 8 * 64 * 1024 * 1024 // 4096 // 2  # every 4 kB page faulted in again
    assert tuned < default // 10


def test_every_subcommand_is_registered_and_a_missing_one_fails_loudly(monkeypatch):
    import service.cli as cli

    listing = build_parser().format_help()
    assert all(name.replace("_", "-") in listing for name in cli.COMMAND_MODULES)
    monkeypatch.setattr(cli, "COMMAND_MODULES", (*cli.COMMAND_MODULES, "paint"))
    with pytest.raises(ModuleNotFoundError, match="service.cli.paint"):
        build_parser()

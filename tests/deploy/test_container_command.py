"""The image's CMD, run here as the container runs it: settings from the environment
only, then its HEALTHCHECK command against it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deploy_files import ROOT, deploy_script, dockerfile_instructions

smoke = deploy_script("smoke")

STARTUP_LIMIT_S = 90.0


def _exec_form(keyword: str) -> list[str]:
    (instruction,) = [ins for ins in dockerfile_instructions() if ins.keyword == keyword]
    command = instruction.exec_form()
    assert command is not None, f"{keyword} should use the exec form"
    return command


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _resolve(command: list[str]) -> list[str]:
    """The venv's copy of the command's program (the image puts /opt/venv/bin first)."""
    program = shutil.which(command[0], path=str(Path(sys.executable).parent)) or shutil.which(
        command[0]
    )
    if program is None:
        pytest.skip(f"{command[0]} is not installed (pip install -e .)")
    return [program, *command[1:]]


def _healthcheck(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = _exec_form("HEALTHCHECK")
    assert command[0] == "python"
    script = ROOT / Path(command[1]).relative_to("/app")
    return subprocess.run(
        [sys.executable, str(script), *command[2:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_cmd_serves_and_passes_its_healthcheck_with_environment_settings(tmp_path):
    port = _free_port()
    env = {
        **os.environ,
        "ATELIER_HOST": "127.0.0.1",  # the image sets 0.0.0.0; loopback is enough here
        "ATELIER_PORT": str(port),
        "ATELIER_LOAD_MODELS": "",
        "ATELIER_WEIGHTS_DIR": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
    }
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            _resolve(_exec_form("CMD")), env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while True:
            if server.poll() is not None:
                output = log.read_text()
                if "not built yet" in output:
                    pytest.skip("`atelier serve` is still the placeholder")
                pytest.fail(f"`atelier serve` exited with {server.returncode}:\n{output}")
            result = _healthcheck(env)
            if result.returncode == 0:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"no healthy answer on port {port}:\n{log.read_text()}")
            time.sleep(0.5)
        # The same probe on another port fails: the server took ATELIER_PORT from the env.
        assert _healthcheck({**env, "ATELIER_PORT": str(_free_port())}).returncode == 1
    finally:
        smoke.stop(server, 20)

"""Settings that never crash startup: lists as JSON or comma-separated, one line per bad
setting (no traceback) from ``serve``, ``worker`` and ``atelier check-config``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.cli import main
from service.cli.settings import shown
from service.config import Settings

ROOT = Path(__file__).resolve().parents[3]
LIST_SETTINGS = [
    name for name, field in Settings.model_fields.items() if "list" in str(field.annotation)
]


def test_every_list_setting_is_known():
    assert set(LIST_SETTINGS) == {"webhook_allowed_hosts", "cors_origins"}


@pytest.mark.parametrize("name", LIST_SETTINGS)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hooks.example.com", ["hooks.example.com"]),
        ("a.example.com, b.example.org", ["a.example.com", "b.example.org"]),
        ('["a.example.com", "b.example.org"]', ["a.example.com", "b.example.org"]),
        ("", []),
    ],
)
def test_a_list_setting_reads_one_value_a_comma_list_or_json(monkeypatch, name, text, expected):
    monkeypatch.setenv(f"ATELIER_{name.upper()}", text)
    assert getattr(Settings(_env_file=None), name) == expected


def _atelier(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ATELIER_")}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=ROOT,
        env=environment | env | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("command", ["serve", "worker", "check-config"])
def test_bad_settings_end_the_command_with_one_line_each_and_no_traceback(command):
    done = _atelier(
        command,
        ATELIER_PORT="eighty",
        ATELIER_CORS_ORIGINS='["unterminated',
        ATELIER_MAX_BATCH_SIZE="0",
        ATELIER_API_KEY="x",  # valid: never named
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 3 and "Traceback" not in done.stderr
    assert any(
        line.startswith("atelier: ATELIER_PORT='eighty': ") and "integer" in line for line in lines
    )
    assert any(
        line.startswith("atelier: ATELIER_CORS_ORIGINS=") and "JSON list" in line for line in lines
    )
    assert any(line.startswith("atelier: ATELIER_MAX_BATCH_SIZE='0': ") for line in lines)


def test_flags_are_named_as_flags_and_values_are_shown_safely(capsys, monkeypatch):
    monkeypatch.setenv("ATELIER_MAX_JOBS", "none")
    with pytest.raises(SystemExit) as ended:
        main(["check-config", "--port", "0"])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert "atelier: --port='0': " in err and "ATELIER_MAX_JOBS='none'" in err
    assert shown("api_key", "abc") == shown("webhook_secret", "whsec_x") == "(hidden)"
    assert shown("redis_url", "redis://user:hunter2@10.0.0.1:6379/0") == (
        "'redis://user:***@10.0.0.1:6379/0'"
    )
    assert len(shown("state_dir", "x" * 500)) < 70


def test_check_config_says_ok_for_a_valid_configuration(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("ATELIER_WEBHOOK_ALLOWED_HOSTS", "hooks.example.com")
    monkeypatch.setenv("ATELIER_STATE_DIR", str(tmp_path))
    assert main(["check-config", "--load-models", "adain"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("configuration ok") and "adain" in out


def test_an_s3_blob_store_without_a_bucket_is_a_configuration_error(capsys, monkeypatch):
    monkeypatch.setenv("ATELIER_BLOB_STORE", "s3")
    with pytest.raises(SystemExit) as ended:
        main(["check-config"])
    assert ended.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("atelier: ATELIER_BLOB_S3_BUCKET=") and "needs a bucket" in line


def test_check_config_names_where_big_results_live(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("ATELIER_STATE_DIR", str(tmp_path))
    assert main(["check-config", "--load-models", "adain"]) == 0
    assert f"files in {tmp_path / 'jobs-files'}" in capsys.readouterr().out
    monkeypatch.setenv("ATELIER_BLOB_STORE", "s3")
    monkeypatch.setenv("ATELIER_BLOB_S3_BUCKET", "prints")
    monkeypatch.setenv("ATELIER_BLOB_S3_ENDPOINT_URL", "http://minio:9000")
    assert main(["check-config", "--load-models", "adain"]) == 0
    assert "s3 bucket prints (http://minio:9000)" in capsys.readouterr().out

"""``benchmarks/gpu_check.py --device cpu --quick``: the GPU check's structure, on the CPU.

The figures of a CPU run mean little; what is checked is that every section runs and
reports what a GPU run must (the JSON keys, the numerics, zero host reads per sampler
step, an exact training resume), so the script is ready when a GPU is lent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"

pytestmark = pytest.mark.slow  # one subprocess of ~30 s (CPU time), shared by the module


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("gpu_check") / "check.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "| section | figure |" in run.stdout  # the closing table
    return json.loads(out.read_text())


def test_every_section_reports_without_error(report):
    for key in (
        "device",
        "numerics",
        "adain",
        "dit",
        "profile",
        "oom",
        "training",
        "app",
    ):
        assert key in report and "error" not in report[key], key
    assert report["device"]["type"] == "cpu" and report["device"]["copy_bandwidth_gbs"] > 0


def test_the_norms_match_their_float64_references(report):
    numerics = report["numerics"]
    assert numerics["all_ok"], [r for r in numerics["members"] if not r["ok"]]
    members = {row["member"] for row in numerics["members"]}
    assert {"layer_norm", "rms_norm", "group_norm", "instance_norm", "adain"} <= members
    assert {row["dtype"] for row in numerics["members"]} == {"float32", "bfloat16"}


def test_adain_and_dit_report_speed_and_agreement(report):
    passes = {row["pass"] for row in report["adain"]["runs"]}
    assert passes == {
        "paper (relu3_1 once)",
        "quality",
        "realtime",
        "print quality",
        "print realtime",
    }
    assert all(row["images_per_s"] > 0 for row in report["adain"]["runs"])
    fast = report["adain"]["cpu_fast_against_float32"]
    assert set(fast) == {"paper (relu3_1 once)", "quality", "realtime"}
    assert all(0 <= row["mean_abs"] < 0.2 for row in fast.values())
    dit = report["dit"]
    assert [row["batch"] for row in dit["runs"]] == [1, 2]
    assert dit["syncs"]["per_step"]["host_reads"] == 0
    assert dit["bf16_vs_fp32"]["within_tolerance"]
    assert dit["seed_alone_vs_in_batch"]["mean_abs"] < 1e-3


def test_the_profile_times_the_pass_and_its_copies_and_names_the_costliest_ops(report):
    profiled = report["profile"]
    assert profiled["host_to_host_ms"] > 0 and profiled["on_device_ms"] > 0
    # on the CPU the result is already on the host: both copies cost nothing
    assert profiled["copy_to_pageable_ms"] >= 0 and profiled["copy_to_page_locked_ms"] >= 0
    ops = profiled["top_ops"]
    assert 0 < len(ops) <= 10 and all(op["ms_per_call"] >= 0 for op in ops)
    times = [op["ms_per_call"] for op in ops]
    assert times == sorted(times, reverse=True)


def test_training_resumes_exactly_and_the_gpu_only_parts_say_why_they_did_not_run(report):
    training = report["training"]
    assert training["generator_state_equal"]
    assert training["max_weight_difference_resumed_vs_straight"] == 0.0
    assert "CUDA" in report["oom"]["skipped"]
    assert report["app"].get("ok") or "ATELIER_WEIGHTS_DIR" in report["app"]["skipped"]

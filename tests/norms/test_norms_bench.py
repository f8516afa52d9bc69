"""The norms benchmark runs (tiny shapes) and reports every member; no timing assertions."""

import json
import math
import pathlib
import subprocess
import sys

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "norms_bench.py"
MEMBERS = {
    "batch": "native",
    "layer": "native",
    "group": "native",
    "instance": "native",
    "rms": "native",
    "local_response": "native",
    "adain": "composite",
    "ada_layer_norm": "composite",
    "global_response_norm": "composite",
    "switchable": "composite",
}


def test_quick_bench_reports_every_member_with_finite_figures():
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", "--repeats", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    results = json.loads(run.stdout)
    assert {r["member"]: r["kind"] for r in results} == MEMBERS
    for r in results:
        for key in ("ours_ms", "baseline_ms", "ours_gbs", "baseline_gbs", "figure"):
            assert math.isfinite(r[key]) and r[key] > 0, (r["member"], key)
        ratio = r["ours_ms"] / r["baseline_ms"]
        expected = ratio if r["kind"] == "native" else 1 / ratio
        assert math.isclose(r["figure"], expected, rel_tol=1e-9)

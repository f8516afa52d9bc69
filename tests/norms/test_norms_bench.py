"""The norms benchmark: it compares like with like, and its figures read the timings the
right way round. No timing assertion: the clock is replaced where a figure is checked."""

import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest
import torch

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


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("norms_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.fixture(scope="module")
def cases(bench):
    return bench.build_cases(bench.QUICK_IMAGE_SHAPE, bench.QUICK_TOKEN_SHAPE)


def test_every_member_is_timed_against_a_baseline_computing_the_same_values(cases):
    assert {case.member: case.kind for case in cases} == MEMBERS
    with torch.inference_mode():
        for case in cases:
            ours, baseline = case.ours(), case.baseline()
            assert ours.shape == baseline.shape, case.member
            torch.testing.assert_close(ours, baseline, rtol=1e-4, atol=1e-4, msg=case.member)


def test_a_baseline_that_computes_something_else_is_refused(bench, cases):
    case = next(c for c in cases if c.member == "layer")
    wrong = bench.Case(case.member, case.kind, case.shape, case.ours,
                       lambda: case.baseline() + 0.1, case.nbytes)  # fmt: skip
    with pytest.raises(AssertionError):
        bench.measure(wrong, repeats=2)


@pytest.mark.parametrize(("member", "figure", "met"), [("layer", 2.0, False),
                                                      ("adain", 0.5, False)])  # fmt: skip
def test_figures_read_ours_twice_as_slow_as_the_baseline(bench, cases, monkeypatch, member,
                                                         figure, met):  # fmt: skip
    """ours takes 2 ms and the baseline 1 ms: native figure ours/torch = 2, composite
    figure eager/ours = 0.5; both miss their targets; GB/s = bytes / seconds."""
    case = next(c for c in cases if c.member == member)
    monkeypatch.setattr(bench, "_time_once", lambda fn: 2e-3 if fn is case.ours else 1e-3)
    result = bench.measure(case, repeats=4)
    assert (result.ours_ms, result.baseline_ms) == (pytest.approx(2.0), pytest.approx(1.0))
    assert result.figure == pytest.approx(figure) and result.met is met
    assert result.ours_gbs == pytest.approx(case.nbytes / 2e-3 / 1e9)


def test_quick_run_prints_every_member_as_json():
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", "--repeats", "2"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    results = json.loads(run.stdout)
    assert {r["member"]: r["kind"] for r in results} == MEMBERS
    assert all(math.isfinite(r["ours_ms"]) and r["ours_ms"] > 0 for r in results)

"""Aggregating scorer verdicts, and the dit_eval benchmark on ground-truth renders."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from evaluation import CATEGORIES, ScoreResult, evaluate_images, summarize
from models.shapes import ShapesDataset, eval_prompts

ROOT = Path(__file__).resolve().parents[2]


def _result(ok, exact=True, **verdicts):
    values = {name: verdicts.get(name) for name in CATEGORIES if name != "exact"}
    return ScoreResult(ok=ok, exact=exact, **values)


def test_summarize_counts_each_category_over_the_prompts_that_constrain_it():
    results = [
        _result(True, colour=True, shape=True),
        _result(False, colour=True, shape=False, relation=False),
        _result(False, exact=False, colour=False, shape=False, count=True),
        _result(True, colour=True, shape=True, relation=True),
    ]
    report = summarize(results)
    assert report.n == 4
    assert report.overall == pytest.approx(2 / 4)
    assert report.per_category["colour"] == pytest.approx(3 / 4)
    assert report.per_category["shape"] == pytest.approx(2 / 4)
    assert report.per_category["relation"] == pytest.approx(1 / 2)
    assert report.per_category["count"] == pytest.approx(1.0)
    assert report.per_category["position"] is None
    assert report.per_category["exact"] == pytest.approx(3 / 4)
    assert report.support == {
        "colour": 4,
        "shape": 4,
        "count": 1,
        "size": 0,
        "position": 0,
        "relation": 2,
        "exact": 4,
    }
    with pytest.raises(ValueError):
        summarize([])


def test_evaluate_images_is_perfect_on_renders_and_zero_on_blank_images():
    dataset = ShapesDataset("heldout", seed=2, length=40)
    images = torch.stack([dataset[i][0] for i in range(40)])
    captions = [dataset[i][1] for i in range(40)]
    report = evaluate_images(images, captions)
    assert report.overall == 1.0
    assert all(v in (None, 1.0) for v in report.per_category.values())
    blank = evaluate_images(torch.zeros(40, 3, 32, 32), captions)
    assert blank.overall == 0.0 and blank.per_category["shape"] == 0.0
    with pytest.raises(ValueError):
        evaluate_images(images[:3], captions)


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("dit_eval", ROOT / "benchmarks" / "dit_eval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dit_eval_on_ground_truth_renders_scores_one(capsys, tmp_path):
    argv = ["--ground-truth", "--n", "30", "--json", "--grid", str(tmp_path / "eval.png")]
    assert _load_benchmark().main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    (row,) = result["rows"]
    assert row["report"]["n"] == result["prompts"] == 30
    assert row["report"]["overall"] == 1.0
    lines = (tmp_path / "eval-g1.txt").read_text().splitlines()
    assert len(lines) == 30 and all(" ok " in line for line in lines)
    assert (tmp_path / "eval-g1.png").stat().st_size > 0


def test_dit_eval_split_train_scores_training_captions(capsys):
    assert (
        _load_benchmark().main(["--ground-truth", "--split", "train", "--n", "12", "--json"]) == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["split"] == "train"
    assert result["rows"][0]["report"]["overall"] == 1.0


def test_dit_eval_run_pairs_seeds_with_prompts():
    """``run`` gives prompt ``i`` the seed ``seed + i`` whatever the batch size."""
    module = _load_benchmark()
    prompts = eval_prompts(7)
    calls = []

    def generate(chunk, guidance, seeds, plan_layout):
        calls.append((list(chunk), guidance, list(seeds), plan_layout))
        return torch.zeros(len(chunk), 3, 32, 32)

    report, _, images = module.run(generate, prompts, 2.5, False, seed=10, batch=3)
    assert images.shape == (7, 3, 32, 32)
    assert [c[2] for c in calls] == [[10, 11, 12], [13, 14, 15], [16]]
    assert sum((c[0] for c in calls), []) == prompts
    assert {c[1] for c in calls} == {2.5} and {c[3] for c in calls} == {False}
    assert report.overall == 0.0 and report.n == 7
    assert np.isclose(report.per_category["colour"], 0.0)


def test_dit_eval_run_scores_against_the_captions_given():
    """Images drawn from one text are judged against another caption (paraphrase rows)."""
    module = _load_benchmark()
    captions = eval_prompts(6)
    render_captions = module.ground_truth_generator(0)
    images_of = [render_captions(captions, 1.0, list(range(6)), None)]

    def generate(chunk, guidance, seeds, plan_layout):
        return images_of[0][seeds[0] : seeds[0] + len(chunk)]

    report, _, _ = module.run(generate, ["x"] * 6, 1.0, None, 0, 4, captions=captions)
    assert report.overall == 1.0
    shifted, _, _ = module.run(generate, ["x"] * 6, 1.0, None, 0, 4, captions=captions[::-1])
    assert shifted.overall < 1.0


def test_dit_eval_paraphrase_rows_sit_beside_the_grammar_rows(capsys):
    """Only the plumbing: the held-out paraphrases' scores are never asserted in tests."""
    assert _load_benchmark().main(["--ground-truth", "--paraphrase", "--n", "5", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [row["prompts"] for row in result["rows"]] == ["grammar", "paraphrase"]
    assert all(row["report"]["n"] == 5 for row in result["rows"])
    assert {"understood_exactly", "nothing_ignored", "grammar", "paraphrase_minus_grammar"} <= set(
        result
    )

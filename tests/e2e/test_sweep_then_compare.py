"""Sweep, then compare: two commands, on real runs (a 2-variant sweep of a tiny model).

The runs score themselves when they complete (trainer.evaluate_at_end, on in the Table 3
experiments); compare.py --score makes the evaluations that are missing or stale.
"""

import json
import shutil
import subprocess
import sys

import pytest

from evaluation.compare import TABLE3_EVAL
from tests.conftest import ROOT, script_main
from tests.e2e.test_reliability import quick_overrides, run_cli

compare = script_main("compare")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, cache_dir):
    """`python train.py -m position=sinusoidal,learned trainer.evaluate_at_end=true ...`."""
    folder = tmp_path_factory.mktemp("sweep")
    overrides = [
        "-m",
        *quick_overrides(cache_dir, "trainer.max_steps=3", "trainer.evaluate_at_end=true"),
        "position=sinusoidal,learned",
        f"hydra.sweep.dir={folder}",
    ]
    result = run_cli("train.py", overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder


def runs_of(folder) -> dict:
    """{position choice: run directory} of the finished runs under folder."""
    runs = [p.parent for p in folder.glob("*/metrics.json")]
    return {json.loads((r / "metrics.json").read_text())["position_choice"]: r for r in runs}


def test_a_sweep_scores_itself_and_compares_in_one_more_command(sweep, tmp_path):
    runs = runs_of(sweep)
    assert sorted(runs) == ["learned", "sinusoidal"]
    for choice, run in runs.items():
        scores = json.loads((run / "eval" / f"{TABLE3_EVAL}.json").read_text())
        assert scores["step"] == 3 and scores["split"] == "validation" and scores["beam"] == 4
        assert scores["position"] == choice and scores["checkpoint"] == "last"
    result = compare([str(sweep), "--resamples", "0", "--out", str(tmp_path)])
    assert [row["variant"] for row in result["variants"]] == ["sinusoidal", "learned"]


def test_compare_scores_the_runs_that_lack_an_evaluation(sweep, tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    for run in runs_of(copy).values():
        shutil.rmtree(run / "eval")
    with pytest.raises(SystemExit):
        compare([str(copy), "--resamples", "0"])  # nothing to compare: refused, one line
    result = compare([str(copy), "--resamples", "0", "--score", "--eval", "validation-last-beam1"])
    assert sorted(r["eval_step"] for r in result["runs"]) == [3, 3]
    for run in runs_of(copy).values():
        assert (run / "eval" / "validation-last-beam1.json").is_file()


def test_a_resumed_run_makes_its_evaluation_stale(sweep, tmp_path, cache_dir):
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    learned = runs_of(copy)["learned"]
    overrides = [*quick_overrides(cache_dir, "trainer.max_steps=5"), "position=learned"]
    resumed = subprocess.run(
        [sys.executable, "train.py", *overrides, f"hydra.run.dir={learned}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with pytest.raises(SystemExit):
        compare([str(copy), "--resamples", "0"])
    result = compare([str(copy), "--resamples", "0", "--score"])
    assert sorted(r["eval_step"] for r in result["runs"]) == [3, 5]

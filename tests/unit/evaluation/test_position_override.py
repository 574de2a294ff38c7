"""evaluate.py position_override: RoPE scaled at inference without touching the checkpoint."""

import hashlib
import json
import subprocess
import sys

import pytest

from common.errors import UserError
from evaluation.evaluate import evaluate
from tests.conftest import ROOT, compose_config, tiny_run_overrides

LINES = ["the dog sees the cat", "a small house", "the red car is fast", "he reads", "we go"]


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory, cache_dir):
    from training.launch import train

    run_dir = tmp_path_factory.mktemp("rope-run")
    extra = ("position=rope", "trainer.max_steps=20", "trainer.eval_every=20")
    train(compose_config(tiny_run_overrides(run_dir, cache_dir, *extra)))
    for name in ("in.en", "ref.de"):  # the references only need to exist: ppl is compared
        (run_dir / name).write_text("".join(line + "\n" for line in LINES))
    return run_dir


def scores(run_dir, *overrides):
    files = [f"src_file={run_dir / 'in.en'}", f"ref_file={run_dir / 'ref.de'}"]
    args = [f"run_dir={run_dir}", *files, "beam=1", *overrides]
    return evaluate(compose_config(args, config_name="evaluate"))


def hypotheses(result) -> list[str]:
    return open(result["hypotheses"], encoding="utf-8").read().splitlines()


def test_override_is_applied_recorded_and_leaves_the_checkpoint(rope_run):
    checkpoint = rope_run / "checkpoints" / "last.pt"
    before = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    plain = scores(rope_run, "name=plain")
    assert plain["position_override"] == {}
    with pytest.raises(UserError, match="scaling=ntk with factor 1 scales nothing"):
        scores(rope_run, "name=ntk1", "position_override.scaling=ntk")  # probe p-11
    assert not (rope_run / "eval" / "ntk1.json").exists()
    scaled = scores(
        rope_run, "name=ntk4", "position_override.scaling=linear", "position_override.factor=4"
    )
    written = json.loads((rope_run / "eval" / "ntk4.json").read_text())
    assert written["position_override"] == {"scaling": "linear", "factor": 4.0}
    assert scaled["ppl"] != plain["ppl"]  # the scaled rotation reached the model
    assert hashlib.sha256(checkpoint.read_bytes()).hexdigest() == before


def test_a_setting_that_is_not_inference_only_is_one_error_line(rope_run):
    result = subprocess.run(
        [sys.executable, "evaluate.py", f"run_dir={rope_run}", "+position_override.base=500"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: position_override.base is not an inference-only")
    assert "Traceback" not in result.stderr
    assert not (rope_run / "eval" / "validation-last-beam4.json").exists()


def split_scores(run_dir, *overrides):
    """An evaluation of the run's validation split at beam 1 under its default name."""
    args = [f"run_dir={run_dir}", "split=validation", "beam=1", *overrides]
    return evaluate(compose_config(args, config_name="evaluate"))


def test_an_override_never_takes_the_name_of_the_runs_own_evaluation(rope_run):
    scaled = split_scores(rope_run, "position_override.scaling=ntk", "position_override.factor=2")
    assert scaled["name"] == "validation-last-beam1-ntk-factor2"
    assert not (rope_run / "eval" / "validation-last-beam1.json").exists()
    plain = split_scores(rope_run)
    assert plain["name"] == "validation-last-beam1" and plain["position_override"] == {}


@pytest.mark.parametrize(
    "overrides",
    [
        ("name=validation-last-beam4",),  # beam 1 under a beam-4 name
        (
            "name=validation-last-beam1",
            "position_override.scaling=linear",
            "position_override.factor=2",
        ),  # the plain name
    ],
)
def test_a_default_name_other_settings_would_write_is_refused(rope_run, overrides):
    from common.errors import UserError

    before = {p.name: p.read_bytes() for p in (rope_run / "eval").glob("*")}
    with pytest.raises(UserError, match=r"is the default name of other settings \(these write"):
        split_scores(rope_run, *overrides)
    assert {p.name: p.read_bytes() for p in (rope_run / "eval").glob("*")} == before


def test_an_evaluation_keeps_the_hashes_of_the_lines_it_scored(rope_run):
    from runs.run import lines_sha256

    result = scores(rope_run, "name=hashed")
    assert result["references_sha256"] == lines_sha256(LINES) == result["sources_sha256"]
    assert lines_sha256(LINES[:-1]) != lines_sha256(LINES)

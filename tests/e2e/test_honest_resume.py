"""Honest resumes and records: one entry per segment, metrics over every segment, no rework."""

import json
import shutil

import pytest
import torch

from runs.device import machine_description
from runs.record import code_version, read_segments
from tests.conftest import compose_config
from tests.e2e.test_reliability import quick_overrides
from training.launch import train


def run(run_dir, cache_dir, steps: int, *extra: str) -> dict:
    """train() on the quick test model in run_dir to `steps` steps."""
    overrides = [f"run_dir={run_dir}", f"trainer.max_steps={steps}", *extra]
    return train(compose_config(quick_overrides(cache_dir, *overrides)))


@pytest.fixture(scope="module")
def two_segments(tmp_path_factory, cache_dir):
    """A run trained to 3 steps, then resumed to 6 with another log cadence."""
    run_dir = tmp_path_factory.mktemp("two_segments")
    first = run(run_dir, cache_dir, 3)
    second = run(run_dir, cache_dir, 6, "trainer.log_every=2")
    return run_dir, first, second


def test_every_segment_is_on_record_with_the_settings_it_changed(two_segments):
    run_dir, _, _ = two_segments
    first, second = read_segments(run_dir)
    assert (first["start_step"], first["end_step"], second["start_step"]) == (0, 3, 3)
    assert second["end_step"] == 6 and first["changed_settings"] == []
    assert second["changed_settings"] == ["trainer.log_every: 1 -> 2", "trainer.max_steps: 3 -> 6"]
    assert first["outcome"] == "trainer.max_steps=3 reached"
    assert second["outcome"] == "trainer.max_steps=6 reached"
    assert first["hardware"] == second["hardware"] == machine_description(torch.device("cpu"))
    assert "torch " in first["hardware"]
    assert first["code"] == second["code"] == code_version()  # the commit of this checkout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs the git command")
def test_the_code_version_is_the_commit_and_says_when_files_changed(tmp_path):
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    assert code_version(tmp_path).startswith("unrecorded (fatal: not a git repository")
    git("init", "-q")
    (tmp_path / "model.py").write_text("x = 1\n")
    git("add", "model.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    (tmp_path / "notes.txt").write_text("untracked files are not the code\n")
    assert code_version(tmp_path) == head and len(head) == 40
    (tmp_path / "model.py").write_text("x = 2\n")
    assert code_version(tmp_path) == f"{head} + uncommitted changes (1 files)"


def test_metrics_count_every_segment(two_segments):
    run_dir, first, second = two_segments
    assert second == json.loads((run_dir / "metrics.json").read_text())
    assert second["steps"] == 6 and second["segments"] == 2 and second["train_loss"] is not None
    assert second["wall_seconds"] > first["wall_seconds"]  # the first segment's time included
    tokens, wall = second["tokens_seen"], second["wall_seconds"]  # wall rounded to 0.1 s
    assert tokens / (wall + 0.06) <= second["tokens_per_s"] <= tokens / (wall - 0.06)
    assert second["tokens_seen"] > first["tokens_seen"]


def test_re_running_a_complete_run_changes_nothing(two_segments, cache_dir, caplog):
    run_dir, _, second = two_segments
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with caplog.at_level("INFO", logger="train"):
        again = run(run_dir, cache_dir, 6, "trainer.log_every=2")
    assert again == second and "is complete" in caplog.text and "nothing changed" in caplog.text
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert after == before


def test_resume_uses_the_run_tokenizer_with_the_cache_deleted(tmp_path, cache_dir, caplog):
    own_cache = tmp_path / "cache"
    shutil.copytree(cache_dir, own_cache)
    run(tmp_path / "run", own_cache, 2)
    shutil.rmtree(own_cache)
    with caplog.at_level("INFO", logger="train"):
        metrics = run(tmp_path / "run", own_cache, 4)
    assert metrics["steps"] == 4 and "resumed from step 2" in caplog.text
    assert f"data: tokenizer {tmp_path / 'run' / 'tokenizer' / 'spm.model'}" in caplog.text
    assert not (own_cache / "tokenizers").exists()  # nothing retrained

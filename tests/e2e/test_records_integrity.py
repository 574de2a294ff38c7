"""Every record describes the weights beside it (issue 34, the training side).

Tiny real runs, in-process where Hydra plays no part and through the command line where its
output (.hydra/, train.log) is the record in question: a resume on an edited corpus, a refused
launch (alone or racing another), a reused directory without checkpoints, a changed thread
count, a bit-flipped checkpoint and the smoothed training loss across a resume.
"""

import json
import logging
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
import yaml

from common.errors import UserError
from data.toy import main as write_toy_corpus
from evaluation.evaluate import evaluate_run
from runs.checkpoint import CheckpointError, load_checkpoint
from runs.directory import LOCK_FILE, EarlierRecordsError
from runs.record import start_segment
from runs.resume import ResumeError
from tests.conftest import ROOT, compose_config
from tests.e2e.test_reliability import quick_overrides
from training.launch import train


def quick(cache_dir: Path, run_dir: Path, steps: int, *extra: str) -> list[str]:
    """A 50k-parameter model on 300 toy pairs, a checkpoint at every step."""
    return quick_overrides(cache_dir, f"run_dir={run_dir}", f"trainer.max_steps={steps}", *extra)


def run(cache_dir: Path, run_dir: Path, steps: int, *extra: str) -> dict:
    """Train (or resume) in run_dir to `steps` steps, in-process; the final metrics."""
    return train(compose_config(quick(cache_dir, run_dir, steps, *extra)))


def snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file under run_dir (the lock file aside) and its bytes."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name != LOCK_FILE
    }


def run_cli(overrides: list[str]) -> subprocess.CompletedProcess:
    """`python train.py <overrides>` from the project root, its output as text."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    command = [sys.executable, "train.py", *overrides]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def cli_overrides(cache_dir: Path, run_dir: Path, steps: int, *extra: str) -> list[str]:
    """quick()'s overrides for the command line: the run directory is Hydra's."""
    overrides = [o for o in quick(cache_dir, run_dir, steps, *extra) if not o.startswith("run_")]
    return [*overrides, f"hydra.run.dir={run_dir}"]


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory, cache_dir) -> Path:
    """A finished 6-step run, checkpointed at every step (copy it before changing it)."""
    run_dir = tmp_path_factory.mktemp("six")
    run(cache_dir, run_dir, 6)
    return run_dir


@pytest.fixture(scope="module")
def ten_steps(tmp_path_factory, cache_dir) -> Path:
    """An uninterrupted 10-step run."""
    run_dir = tmp_path_factory.mktemp("ten")
    run(cache_dir, run_dir, 10)
    return run_dir


def copy_run(source: Path, tmp_path: Path) -> Path:
    """A copy of a run directory to change."""
    target = tmp_path / "run"
    shutil.copytree(source, target)
    return target


def assert_same_weights(a: Path, b: Path) -> None:
    """Bitwise-equal step, model and optimizer tensors in two checkpoints."""
    first, second = load_checkpoint(a), load_checkpoint(b)
    assert first["step"] == second["step"]
    for name, tensor in first["model"].items():
        assert torch.equal(tensor, second["model"][name]), name
    for index, moments in first["optimizer"]["state"].items():
        for key, tensor in moments.items():
            assert torch.equal(tensor, second["optimizer"]["state"][index][key]), (index, key)


# --- (1) the corpus a checkpoint was trained on ---------------------------------------------


def text_run(corpus: Path, cache_dir: Path, run_dir: Path, steps: int) -> list[str]:
    """A tiny model on the plain-text corpus in `corpus`."""
    files = [
        f"data.files.{split}.{lang}={corpus / f'{split}.{lang}'}"
        for split in ("train", "validation", "test")
        for lang in ("en", "de")
    ]
    return [
        "data=text",
        *files,
        "model=tiny",
        "model.d_model=32",
        "model.d_ff=64",
        "data.vocab_size=100",
        "data.max_tokens=256",
        f"cache_dir={cache_dir}",
        f"run_dir={run_dir}",
        "trainer.update_freq=1",
        "trainer.max_minutes=null",
        "trainer.save_every_minutes=null",
        "trainer.save_every_steps=1",
        "trainer.num_threads=1",
        "trainer.eval_every=100000",
        f"trainer.max_steps={steps}",
    ]


def resume_on_replaced(split: str, tmp_path) -> tuple[str, Path, dict]:
    """Train 3 steps on a toy corpus, replace one split's files by other lines (same names),
    and resume to 5: (the ResumeError's message, the run folder, its files before)."""
    corpus, other, run_dir = tmp_path / "corpus", tmp_path / "other", tmp_path / "run"
    sizes = {"train_size": 200, "validation_size": 20, "test_size": 5, "test_long_size": 1}
    write_toy_corpus(corpus, seed=0, **sizes)
    write_toy_corpus(other, seed=1, **sizes)
    train(compose_config(text_run(corpus, tmp_path / "cache", run_dir, 3)))
    for lang in ("en", "de"):
        shutil.copy(other / f"{split}.{lang}", corpus / f"{split}.{lang}")
    before = snapshot(run_dir)
    with pytest.raises(ResumeError) as refused:
        train(compose_config(text_run(corpus, tmp_path / "cache", run_dir, 5)))
    return str(refused.value), run_dir, before


def test_a_resume_on_an_edited_training_corpus_is_refused_and_changes_nothing(tmp_path):
    message, run_dir, before = resume_on_replaced("train", tmp_path)
    assert "another training corpus" in message and "last.pt" in message, message
    assert "run_dir" in message and "\n" not in message
    assert snapshot(run_dir) == before


def test_a_resume_on_a_replaced_dev_set_is_refused_and_changes_nothing(tmp_path):
    """The dev curve and best.pt of one run come from one dev set (was: accepted silently)."""
    message, run_dir, before = resume_on_replaced("validation", tmp_path)
    assert re.search("validated on another dev set .*20 pairs", message), message
    assert "best.pt" in message and "\n" not in message
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("split", ["test", "validation"])
def test_a_replaced_test_or_dev_set_is_not_scored_under_its_split(tmp_path, split):
    """evaluate.py split=<s> scores the text the run recorded of <s> at launch (was: a replaced
    test or dev set scored silently under the split's name)."""
    corpus, other, run_dir = tmp_path / "corpus", tmp_path / "other", tmp_path / "run"
    sizes = {"train_size": 200, "validation_size": 20, "test_size": 5, "test_long_size": 1}
    write_toy_corpus(corpus, seed=0, **sizes)
    write_toy_corpus(other, seed=1, **sizes)
    train(compose_config(text_run(corpus, tmp_path / "cache", run_dir, 2)))
    scored = evaluate_run(run_dir, f"split={split}", "beam=1", "name=before")
    assert scored["n_sentences"] > 0
    shutil.copy(other / f"{split}.de", corpus / f"{split}.de")  # the references only
    before = snapshot(run_dir)
    with pytest.raises(UserError, match=f"split={split}: .* not the one .*data.json recorded"):
        evaluate_run(run_dir, f"split={split}", "beam=1", "name=after")
    assert snapshot(run_dir) == before


def test_a_resume_reading_a_replaced_tokenizer_file_names_that_file(tmp_path):
    """The run's own tokenizer/spm.model replaced: the refusal names it (was: it blamed the
    data config, which had not changed)."""
    corpus, run_dir = tmp_path / "corpus", tmp_path / "run"
    write_toy_corpus(corpus, seed=0, train_size=200, validation_size=20, test_size=5)
    train(compose_config(text_run(corpus, tmp_path / "cache", run_dir, 2)))
    other = text_run(corpus, tmp_path / "cache", tmp_path / "other", 1)
    train(compose_config([*other, "data.vocab_size=90"]))
    shutil.copy(tmp_path / "other" / "tokenizer" / "spm.model", run_dir / "tokenizer" / "spm.model")
    with pytest.raises(ResumeError, match="tokenizer/spm.model has .* restore that file"):
        train(compose_config(text_run(corpus, tmp_path / "cache", run_dir, 3)))


def test_checkpoints_keep_the_fingerprint_of_the_pairs_they_trained_on(six_steps):
    state = load_checkpoint(six_steps / "checkpoints" / "last.pt")
    assert state["corpus"]["pairs"] > 0 and len(state["corpus"]["sha256"]) == 64


# --- (2, 3) a refused launch changes nothing, Hydra's output included -----------------------


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory, cache_dir) -> Path:
    """A 4-step run trained through the command line (Hydra writes its record)."""
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    done = run_cli(cli_overrides(cache_dir, run_dir, 4))
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def test_a_refused_resume_leaves_the_run_record_as_it_was(cli_run, cache_dir, tmp_path):
    run_dir = copy_run(cli_run, tmp_path)
    before = snapshot(run_dir)
    assert ".hydra/config.yaml" in before and "train.log" in before
    refused = run_cli(cli_overrides(cache_dir, run_dir, 4, "seed=7"))
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 1 and lines[-1].startswith("error: "), refused.stderr[-3000:]
    assert "seed: 1 -> 7" in lines[-1]
    assert snapshot(run_dir) == before
    assert yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())["seed"] == 1


@pytest.mark.parametrize("bad", ["model.n_heads=0", "data.max_ratio=abc"])
def test_a_refused_first_launch_leaves_no_folder_and_an_old_one_as_it_was(bad, cache_dir, tmp_path):
    """Refused before the lock (a setting) or after it (a data setting): the run folder the
    launch made is gone again, and a folder that was there before keeps no lock file."""
    new, old = tmp_path / "new", tmp_path / "old"
    old.mkdir()
    time.sleep(0.05)  # the old folder is older than the launch
    for run_dir in (new, old):
        refused = run_cli(cli_overrides(cache_dir, run_dir, 4, bad))
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 1 and lines[-1].startswith("error: "), refused.stderr[-3000:]
    assert not new.exists()
    assert old.is_dir() and not any(old.iterdir())


def test_a_launch_refused_after_its_tokenizer_copy_leaves_no_folder(cache_dir, tmp_path):
    """position.base=0.5 is refused when the model is built, after the data and the run's own
    tokenizer copy: the copy goes, and with it the folder the launch made (an old one stays)."""
    new, old = tmp_path / "new", tmp_path / "old"
    old.mkdir()
    (old / "notes.txt").write_text("the user's\n")
    for run_dir in (new, old):
        with pytest.raises(UserError, match="position.base=0.5"):
            run(cache_dir, run_dir, 2, "position.base=0.5")
    assert not new.exists()
    assert sorted(p.name for p in old.iterdir()) == ["notes.txt"]


def test_of_two_launches_at_once_the_record_is_the_one_that_trained(cache_dir, tmp_path):
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    launches = [
        subprocess.Popen(
            [sys.executable, "train.py", *cli_overrides(cache_dir, run_dir, 4, f"seed={seed}")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 9)
    ]
    errors = [p.communicate(timeout=300)[1] for p in launches]
    codes = [p.returncode for p in launches]
    assert sorted(codes) == [0, 1], errors
    assert "error: " in errors[codes.index(1)]
    trained = (1, 9)[codes.index(0)]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    config = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
    overrides = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    assert metrics["seed"] == config["seed"] == trained
    assert f"seed={trained}" in overrides


# --- (5) a reused directory whose checkpoints are gone ----------------------------------------


def test_records_without_checkpoints_are_refused_unless_the_run_starts_over(
    six_steps, cache_dir, tmp_path, caplog
):
    run_dir = copy_run(six_steps, tmp_path)
    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "eval").mkdir()
    (run_dir / "eval" / "validation-last-beam4.json").write_text('{"bleu": 1.0}\n')
    before = snapshot(run_dir)
    with pytest.raises(EarlierRecordsError) as refused:
        run(cache_dir, run_dir, 4, "seed=5")
    message = str(refused.value)
    assert str(run_dir) in message and "metrics.json" in message and "eval/" in message
    assert "trainer.start_over=true" in message and "\n" not in message
    assert snapshot(run_dir) == before
    with caplog.at_level("INFO", logger="train"):
        metrics = run(cache_dir, run_dir, 4, "seed=5", "trainer.start_over=true")
    assert "deleted the earlier run's metrics.json, segments.json, eval/" in caplog.text
    assert metrics["seed"] == 5 and metrics["segments"] == 1
    segments = json.loads((run_dir / "segments.json").read_text())["segments"]
    assert [(s["start_step"], s["end_step"]) for s in segments] == [(0, 4)]
    assert not (run_dir / "eval").exists()


def test_another_runs_log_and_events_alone_are_earlier_records(six_steps, cache_dir, tmp_path):
    """A folder holding only another run's train.log and TensorBoard events (was: the launch
    appended to that log and left the events beside its own, without a word)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "train.log").write_text("[2026-12-01 10:00:00][train][INFO] - another run\n")
    shutil.copytree(six_steps / "tensorboard", run_dir / "tensorboard")
    before = snapshot(run_dir)
    with pytest.raises(EarlierRecordsError, match=r"\(train.log, tensorboard/\)"):
        run(cache_dir, run_dir, 2, "seed=5")
    assert snapshot(run_dir) == before
    run(cache_dir, run_dir, 2, "seed=5", "trainer.start_over=true")
    assert not (run_dir / "train.log").exists()  # deleted (in-process: no log file written)


def test_a_launch_killed_before_its_first_checkpoint_is_trained_afresh(cache_dir, tmp_path):
    run_dir = tmp_path / "run"
    start_segment(run_dir, 0, ["seed=1"], [])  # a launch killed before it saved anything
    metrics = run(cache_dir, run_dir, 2)
    segments = json.loads((run_dir / "segments.json").read_text())["segments"]
    assert metrics["steps"] == 2 and [s["end_step"] for s in segments] == [None, 2]


def test_start_over_with_checkpoints_resumes(six_steps, cache_dir, tmp_path, caplog):
    run_dir = copy_run(six_steps, tmp_path)
    with caplog.at_level("INFO", logger="train"):
        run(cache_dir, run_dir, 7, "trainer.start_over=true")
    assert "resumed from step 6" in caplog.text


def test_start_over_refused_as_a_resume_says_it_does_not_apply(six_steps, cache_dir, tmp_path):
    """Probe 1-7: start_over=true below the checkpoint's step was refused as a resume, with no
    word that start_over clears only a run without checkpoints."""
    run_dir = copy_run(six_steps, tmp_path)
    with pytest.raises(ResumeError, match=r"step 6\): .*\(trainer.start_over=true clears only a"):
        run(cache_dir, run_dir, 4, "trainer.start_over=true")


def test_start_over_beside_checkpoints_is_said_as_the_run_resumes(
    six_steps, cache_dir, tmp_path, caplog
):
    """Probe 8-22: start_over=true on a run with checkpoints resumed it without a word (not
    refused: a requeued job repeats its command line)."""
    run_dir = copy_run(six_steps, tmp_path)
    with caplog.at_level("INFO", logger="train"):
        run(cache_dir, run_dir, 6, "trainer.start_over=true")
    assert "trainer.start_over=true: this run has checkpoints (step 6), so it resumes" in (
        caplog.text
    )


# --- (6) the thread count -------------------------------------------------------------------


def test_a_thread_count_change_on_resume_is_warned_as_changing_the_bits(
    six_steps, cache_dir, tmp_path, caplog
):
    run_dir = copy_run(six_steps, tmp_path)
    try:
        with caplog.at_level("INFO", logger="train"):
            run(cache_dir, run_dir, 7, "trainer.num_threads=2")
    finally:
        torch.set_num_threads(1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("trainer.num_threads: 1 -> 2" in w and "bitwise" in w for w in warnings), warnings
    last = json.loads((run_dir / "segments.json").read_text())["segments"][-1]
    assert "trainer.num_threads: 1 -> 2" in last["changed_settings"]


def test_the_docs_do_not_count_threads_among_settings_that_leave_the_math_alone():
    readme = (ROOT / "docs" / "runs.md").read_text(encoding="utf-8")
    start = readme.index("Settings that leave the math alone")
    sentence = readme[start : readme.index(")", start)]
    assert "thread" not in sentence and "device" not in sentence, sentence
    assert "same thread count" in readme


# --- (7) a checksum verified on load ------------------------------------------------------------


def flip_a_bit_in_the_weights(path: Path) -> None:
    """Flip one bit in the middle of the largest tensor stored in a checkpoint file."""
    with zipfile.ZipFile(path) as archive:
        tensors = [e for e in archive.infolist() if "/data/" in e.filename]  # storages
        entry = max(tensors, key=lambda e: e.file_size)
    raw = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack("<HH", raw[entry.header_offset + 26 :][:4])
    start = entry.header_offset + 30 + name_length + extra_length
    raw[start + entry.file_size // 2] ^= 0x04
    path.write_bytes(bytes(raw))


def test_a_bit_flipped_checkpoint_is_refused(six_steps, tmp_path):
    path = tmp_path / "last.pt"
    shutil.copy(six_steps / "checkpoints" / "last.pt", path)
    flip_a_bit_in_the_weights(path)
    assert torch.load(path, weights_only=True)["step"] == 6  # torch itself reads it
    with pytest.raises(CheckpointError, match="corrupt.*sha256"):
        load_checkpoint(path)


def test_a_bit_flipped_last_pt_falls_back_to_the_newest_good_checkpoint(
    six_steps, ten_steps, cache_dir, tmp_path, caplog
):
    run_dir = copy_run(six_steps, tmp_path)
    ckpt_dir = run_dir / "checkpoints"
    for name in ("last.pt", "step_6.pt"):
        flip_a_bit_in_the_weights(ckpt_dir / name)
    with caplog.at_level("INFO", logger="train"):
        run(cache_dir, run_dir, 10)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for name in ("last.pt", "step_6.pt"):
        assert any(str(ckpt_dir / name) in w and "corrupt" in w for w in warnings), warnings
    assert "resumed from step 5" in caplog.text
    assert_same_weights(ten_steps / "checkpoints" / "last.pt", ckpt_dir / "last.pt")


# --- (11) the smoothed training loss -----------------------------------------------------------


def test_train_loss_does_not_depend_on_where_the_run_was_resumed(
    six_steps, ten_steps, cache_dir, tmp_path
):
    run_dir = copy_run(six_steps, tmp_path)
    resumed = run(cache_dir, run_dir, 10)
    straight = json.loads((ten_steps / "metrics.json").read_text())
    assert_same_weights(ten_steps / "checkpoints" / "last.pt", run_dir / "checkpoints" / "last.pt")
    assert resumed["train_loss"] == straight["train_loss"]

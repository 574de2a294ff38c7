"""Self-contained run folders: the tokenizer inside, corpus paths that hold from anywhere."""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from data.toy import main as write_toy_corpus
from runs.checkpoint import RUN_TOKENIZER, load_checkpoint
from tests.conftest import ROOT, compose_config
from training.launch import train


def relative_text_overrides(corpus: Path, cache: Path, run_dir: Path) -> list[str]:
    """A 2-step tiny run on plain-text files named relative to the working directory."""
    files = [
        f"data.files.{split}.{lang}={os.path.relpath(corpus / f'{split}.{lang}')}"
        for split in ("train", "validation", "test")
        for lang in ("en", "de")
    ]
    return [
        "data=text",
        *files,
        "model=tiny",
        "data.vocab_size=100",
        f"cache_dir={cache}",
        f"run_dir={run_dir}",
        "trainer.max_steps=2",
        "trainer.num_threads=1",
        "trainer.effective_tokens=4096",
        "trainer.save_every_minutes=null",
    ]


@pytest.fixture(scope="module")
def relative_run(tmp_path_factory) -> Path:
    """A run trained on a corpus named by relative paths, its cache deleted afterwards."""
    root = tmp_path_factory.mktemp("self_contained")
    write_toy_corpus(
        root / "corpus", train_size=200, validation_size=20, test_size=20, test_long_size=1
    )
    train(compose_config(relative_text_overrides(root / "corpus", root / "cache", root / "run")))
    shutil.rmtree(root / "cache")
    return root / "run"


def test_the_tokenizer_is_in_the_run_folder_and_every_checkpoint_names_it(relative_run):
    copy = relative_run / RUN_TOKENIZER
    for path in (relative_run / "checkpoints").glob("*.pt"):
        state = load_checkpoint(path)
        assert state["tokenizer"]["run_file"] == RUN_TOKENIZER
        assert Path(state["tokenizer"]["path"]) == copy.resolve()
        assert state["tokenizer"]["sha256"] == hashlib.sha256(copy.read_bytes()).hexdigest()
    files = load_checkpoint(relative_run / "checkpoints" / "last.pt")["config"]["data"]["files"]
    assert all(os.path.isabs(path) for langs in files.values() for path in langs.values())


def test_evaluate_works_with_the_cache_deleted_from_another_working_directory(
    relative_run, tmp_path
):
    moved = tmp_path / "moved_run"  # the folder moved, too: nothing may point into the old one
    shutil.copytree(relative_run, moved)
    original = relative_run / RUN_TOKENIZER
    original.rename(tmp_path / "away.model")
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    try:
        result = subprocess.run(
            [sys.executable, str(ROOT / "evaluate.py"), f"run_dir={moved}", "split=test", "beam=1"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        (tmp_path / "away.model").rename(original)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (moved / "eval" / "test-last-beam1.json").is_file()

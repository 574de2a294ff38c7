"""An evaluation or export that fails or is stopped leaves nothing behind, in one line.

On the 2-step run of the bad-input matrix: a full disk while evaluate.py writes eval/ or while
export_hf.py writes its folder, Ctrl-C during an evaluation, and a checkpoint whose weights give
a NaN perplexity: each is one line (exit 1, or 130 for Ctrl-C), and eval/ or --out is as it was.
"""

import errno
import os
import subprocess
import sys

import pytest

import common.files
import interop.export
from common.files import FileWriteError
from evaluation.evaluate import EvaluationError, evaluate
from interop.ctranslate2_export import export_ctranslate2
from interop.export import export_hf
from runs.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tests.conftest import ROOT, compose_config, default_sigint
from tests.e2e import test_reliability as reliability
from tests.e2e.test_reliability import copy_of_run

bad = reliability.bad  # the fixture: corpora and a 2-step run, one folder

FULL_DISK = "Error while serializing: I/O error: No space left on device (os error 28)"


def eval_config(run_dir, *overrides):
    return compose_config([f"run_dir={run_dir}", *overrides], config_name="evaluate")


def files_under(folder) -> list[str]:
    """Every path under folder (hidden ones too), relative to it."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def few_lines(bad) -> list[str]:
    """Three validation pairs as src_file/ref_file overrides, greedy: a quick evaluation."""
    files = [f"src_file={bad / 'three.en'}", f"ref_file={bad / 'three.de'}", "beam=1"]
    if not (bad / "three.de").exists():
        (bad / "three.de").write_text("der Hund\neine Katze\ndas Haus\n", encoding="utf-8")
    return files


def test_a_full_disk_while_writing_eval_is_one_line_and_leaves_no_eval_folder(
    bad, tmp_path, monkeypatch
):
    run_dir = copy_of_run(bad, "full_disk_eval")
    real = common.files.temporary_copy

    def fills_the_disk(path, text):
        if path.suffix == ".json":  # the .hyp's temporary file is written first
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, text)

    monkeypatch.setattr(common.files, "temporary_copy", fills_the_disk)
    with pytest.raises(FileWriteError) as raised:
        evaluate(eval_config(run_dir, *few_lines(bad)))
    message = str(raised.value)
    assert "\n" not in message and message.startswith("No space left on device while writing")
    assert "nothing was written" in message and "free space on that disk" in message
    assert not (run_dir / "eval").exists()


def test_a_nan_perplexity_is_refused_and_writes_nothing(bad, tmp_path):
    run_dir = copy_of_run(bad, "nan_ppl")
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    state.pop("file")
    state["model"]["embedding.weight"][5, 3] = 3.2e36  # an exponent bit flipped
    save_checkpoint(state, tmp_path / "flipped.pt")  # checksum and all: a consistent file
    before = files_under(run_dir)
    overrides = [f"checkpoint={tmp_path / 'flipped.pt'}", *few_lines(bad)]
    with pytest.raises(EvaluationError, match=r"scores ppl=nan on .*nothing written"):
        evaluate(eval_config(run_dir, *overrides))
    assert files_under(run_dir) == before


@pytest.mark.parametrize("exporter", ["marian", "ctranslate2"])
def test_weights_holding_nan_are_not_exported(bad, tmp_path, exporter):
    """A diverged model, its checksum valid (was: exported to a Marian folder without a word)."""
    pytest.importorskip("transformers" if exporter == "marian" else "ctranslate2")
    run_dir = copy_of_run(bad, f"nan_{exporter}")
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    state.pop("file")
    state["model"]["embedding.weight"][5, 3] = float("nan")
    save_checkpoint(state, run_dir / "checkpoints" / "last.pt")  # checksum and all
    out = tmp_path / "exports" / exporter
    export = export_hf if exporter == "marian" else export_ctranslate2
    with pytest.raises(CheckpointError, match=r"checkpoint last of .* NaN or infinity \(embed"):
        export(run_dir, out)
    assert not (tmp_path / "exports").exists()


INTERRUPTED = """
import os, runpy, signal, sys
import evaluation.evaluate as module
real = module.translate_with
def interrupted(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C mid-search
    return real(*args, **kwargs)
module.translate_with = interrupted
sys.argv = ["evaluate.py", *sys.argv[1:]]
runpy.run_path("evaluate.py", run_name="__main__")
"""


def test_ctrl_c_during_an_evaluation_is_one_line_status_130_and_writes_nothing(bad):
    run_dir = copy_of_run(bad, "interrupted_eval")
    before = files_under(run_dir)
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED, f"run_dir={run_dir}", *few_lines(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=default_sigint,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert lines[-1] == "interrupted: nothing written (eval/ as it was)", lines
    assert files_under(run_dir) == before


def test_a_full_disk_during_export_is_one_line_and_leaves_no_folder(bad, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    out = tmp_path / "exports" / "marian"

    def fills_the_disk(*args):
        raise RuntimeError(FULL_DISK)  # as safetensors raises it (a SafetensorError)

    with monkeypatch.context() as patched:
        patched.setattr(interop.export, "write_tokenizer_files", fills_the_disk)
        with pytest.raises(FileWriteError) as raised:
            export_hf(bad / "run", out, max_positions=64)
    message = str(raised.value)
    assert "\n" not in message and message.startswith("No space left on device while writing")
    assert f"the export to {out} (nothing was left there)" in message
    assert not (tmp_path / "exports").exists()  # no partial folder, no hidden staging folder
    assert export_hf(bad / "run", out, max_positions=64) == out  # the rerun is not blocked
    assert (out / "export.json").is_file() and (out / "model.safetensors").is_file()
    assert files_under(tmp_path / "exports") == [
        "marian",
        *(f"marian/{p}" for p in files_under(out)),
    ]
    assert out.stat().st_mode & 0o777 == common.files.new_folder_mode()  # not mkdtemp's 0700

"""An evaluation or export that fails or is stopped leaves nothing behind, in one line.

On the 2-step run of the bad-input matrix: a full disk while evaluate.py writes eval/ or while
export_hf.py writes its folder, Ctrl-C during an evaluation, and a checkpoint whose weights give
a NaN perplexity: each is one line (exit 1, or 130 for Ctrl-C), and eval/ or --out is as it was.
Exports of a seed-2 twin: an average says which steps and weights it holds, and another run's
checkpoint is refused before anything is written.
"""

import errno
import json
import os
import subprocess
import sys

import pytest
import torch

import common.files
import interop.export
from benchmarks.decode import benchmark_engines
from common.errors import UserError
from common.files import FileWriteError
from evaluation.evaluate import EvaluationError, evaluate
from interop.ctranslate2_export import export_ctranslate2
from interop.export import export_hf
from runs.checkpoint import (
    CheckpointError,
    average_checkpoints,
    load_checkpoint,
    save_checkpoint,
    weights_sha256,
)
from runs.run import Run, load_run
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
    Run(run_dir).save_checkpoint(state, "last")  # as a diverging run writes it: recorded
    state["model"]["embedding.weight"][6, 3] = float("inf")  # by hand, beside it (13-3, 13-4)
    save_checkpoint(state, tmp_path / "nan.pt")
    out = tmp_path / "exports" / exporter
    export = export_hf if exporter == "marian" else export_ctranslate2
    with pytest.raises(CheckpointError, match=r"checkpoint last of .* NaN or infinity \(embed"):
        export(run_dir, out)
    with pytest.raises(CheckpointError, match=r"NaN or infinity \(embed"):  # not "another run's"
        export(run_dir, out, checkpoint=str(tmp_path / "nan.pt"))
    assert not (tmp_path / "exports").exists()


def test_weights_holding_nan_are_neither_translated_nor_averaged(bad, tmp_path):
    """The probe's 13-26 and 13-25: NaN weights (checksum valid) translated stdin to an empty
    line with exit 0, and averaged with a sound checkpoint they made a NaN average."""
    run_dir = copy_of_run(bad, "nan_translate")
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    state.pop("file")
    state["model"]["embedding.weight"][5, 3] = float("nan")
    save_checkpoint(state, tmp_path / "nan.pt")
    done = subprocess.run(
        [sys.executable, "evaluate.py", f"run_dir={run_dir}", "translate=true",
         f"checkpoint={tmp_path / 'nan.pt'}"],
        input="a dog runs .\n", cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and done.stdout == ""
    assert "NaN or infinity (embedding.weight)" in done.stderr.strip().splitlines()[-1]
    with pytest.raises(CheckpointError, match=r"nan.pt: the weights hold NaN or infinity"):
        average_checkpoints([run_dir / "checkpoints" / "last.pt", tmp_path / "nan.pt"])
    with pytest.raises(CheckpointError, match=r"NaN or infinity \(embedding.weight\)"):
        benchmark_engines(run_dir, sentences=1, repeats=1, checkpoint=str(tmp_path / "nan.pt"))


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


KILLED_BETWEEN_RENAMES = """
import os, runpy, signal, sys
real, calls = os.replace, []
def replace(*args):
    calls.append(args)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9 before the last rename of eval/ files
    return real(*args)
os.replace = replace
sys.argv = ["evaluate.py", *sys.argv[1:]]
runpy.run_path("evaluate.py", run_name="__main__")
"""


def test_a_kill_between_the_renames_leaves_a_refused_pair_and_the_rerun_cleans_up(bad):
    """The probe's 14-26/14-27: killed between the renames, a new JSON lay beside the .nbest
    of before, and the temporary files stayed. The JSON (which holds the .hyp's sha256) is
    now renamed last, so the JSON before stays (and refuses a .hyp that differs); a rerun
    removes the temporaries."""
    run_dir = copy_of_run(bad, "killed_renames")
    evaluate(eval_config(run_dir, *few_lines(bad), "name=k", "nbest=2", "beam=2"))
    json_file, hyp_file = run_dir / "eval" / "k.json", run_dir / "eval" / "k.hyp"
    before, hyps_before = json_file.read_bytes(), hyp_file.read_bytes()
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    del state["file"]
    torch.manual_seed(0)  # newer weights, as the run would write them training on
    state["model"] = {k: v + 0.5 * torch.randn_like(v) for k, v in state["model"].items()}
    Run(run_dir).save_checkpoint(state, "last")  # (the same settings: the same name may be
    done = subprocess.run(  # rewritten; other settings are refused)
        [sys.executable, "-c", KILLED_BETWEEN_RENAMES, f"run_dir={run_dir}", *few_lines(bad),
         "name=k", "nbest=2", "beam=2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == -9, done.stderr[-2000:]
    assert json_file.read_bytes() == before
    if hyp_file.read_bytes() != hyps_before:  # the newer weights translated otherwise
        with pytest.raises(UserError, match=r"k.hyp is not the file its evaluation wrote"):
            Run(run_dir).hypotheses(json.loads(before), "evaluate again")
    evaluate(eval_config(run_dir, *few_lines(bad), "name=k", "nbest=2", "beam=2"))
    assert sorted(p.name for p in (run_dir / "eval").iterdir()) == ["k.hyp", "k.json", "k.nbest"]


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


@pytest.fixture(scope="module")
def twin(bad):
    """bad's run trained with seed 2 for 4 steps, a step file every 2: another run's weights."""
    run_dir = bad / "twin"
    overrides = ["seed=2", "trainer.max_steps=4", "trainer.save_every_steps=2"]
    reliability.train(
        compose_config([*reliability.text_overrides(bad), f"run_dir={run_dir}"] + overrides)
    )
    return run_dir


def exported(exporter, run_dir, out, checkpoint):
    """The export's export.json and (Marian only) model card, exporting run_dir's checkpoint."""
    pytest.importorskip("transformers" if exporter == "marian" else "ctranslate2")
    if exporter == "marian":
        export_hf(run_dir, out, checkpoint, max_positions=64)
        card = (out / "README.md").read_text(encoding="utf-8")
    else:
        export_ctranslate2(run_dir, out, checkpoint)
        card = ""
    return json.loads((out / "export.json").read_text(encoding="utf-8")), card


@pytest.mark.parametrize("exporter", ["marian", "ctranslate2"])
def test_an_average_is_exported_as_the_mean_of_its_steps(bad, twin, tmp_path, exporter):
    """avg:2 of steps 2 and 4 (was: 'step 2, file sha256 None', its oldest input's step)."""
    evaluate(eval_config(twin, "checkpoint=avg:2", *few_lines(bad)))  # records no weights hash
    info, card = exported(exporter, twin, tmp_path / exporter, "avg:2")
    state, _ = load_run(twin, "avg:2")
    digest = weights_sha256(state)
    assert info["step"] == 4 and info["averaged_steps"] == [2, 4]
    assert info["averaged"] == ["step_2.pt", "step_4.pt"]
    assert info["weights_sha256"] == digest and info.get("checkpoint_sha256") is None
    assert "None" not in json.dumps(info) and "null" not in json.dumps(info)
    if exporter == "marian":
        weights = next(line for line in card.splitlines() if line.startswith("| weights |"))
        assert "mean of steps 2 and 4 (step_2.pt, step_4.pt)" in weights
        assert "step 4" in weights and digest[:12] in weights and "None" not in card
        assert "| test-" not in card and "| files |" not in card  # no evaluation of other weights


@pytest.mark.parametrize("exporter", ["marian", "ctranslate2"])
def test_another_runs_checkpoint_is_refused_before_anything_is_written(
    bad, twin, tmp_path, exporter
):
    """seed 2's last.pt under bad's run (was: a card naming bad's run and its command)."""
    pytest.importorskip("transformers" if exporter == "marian" else "ctranslate2")
    foreign = twin / "checkpoints" / "last.pt"
    export = export_hf if exporter == "marian" else export_ctranslate2
    with pytest.raises(UserError) as raised:
        export(bad / "run", tmp_path / "exports" / exporter, str(foreign))
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"--checkpoint {foreign} holds another run")
    assert "seed" in message and message.endswith(f"(--run-dir {twin})")
    assert not (tmp_path / "exports").exists()

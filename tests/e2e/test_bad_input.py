"""The bad-input matrix, evaluation side: records bound to the weights they describe, bounded
search, and one `error:` line (no traceback) for each user error of evaluate.py, compare.py,
average_checkpoints.py and benchmark.py. Tiny real runs from tests/e2e/test_reliability.py's corpus.
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

from common.errors import UserError
from data.corpus import prepare_data
from data.tokenizer import MODEL_FILE
from evaluation.evaluate import evaluate, translate_stdin
from interop.ctranslate2_engine import COMPUTE_TYPES
from runs.run import load_run
from tests.conftest import ROOT, compose_config, default_sigint, script_main, tiny_model
from tests.e2e import test_reliability as reliability
from tests.e2e.test_reliability import run_cli, text_overrides
from training.launch import check_space, checkpoint_bytes, train

bad = reliability.bad  # the fixture: corpora (good and broken) and a 2-step run, one folder

compare_main = script_main("compare")
average_main = script_main("average_checkpoints")
benchmark_main = script_main("benchmark")


@pytest.fixture(scope="module")
def learned_run(bad):
    """A 2-step run like bad's, with a learned position table: another run's checkpoint."""
    run_dir = bad / "learned_run"
    if not (run_dir / "metrics.json").is_file():
        overrides = [*text_overrides(bad), f"run_dir={run_dir}", "position=learned"]
        train(compose_config([*overrides, "trainer.max_steps=2"]))
    return run_dir


def sha256(path) -> str:
    """The sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copied_run(bad, tmp_path):
    """A copy of bad's 2-step sinusoidal run (the shared one stays as it is)."""
    return shutil.copytree(bad / "run", tmp_path / "run")


def compare_error(args, capsys) -> str:
    """compare.py's one error line for args (it must refuse)."""
    with pytest.raises(SystemExit) as raised:
        compare_main([*args, "--resamples", "0", "--out", str(args[0]) + "-compare"])
    assert raised.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("error: ") and "Traceback" not in "".join(lines)
    return lines[-1]


# --- (4) an evaluation is bound to the checkpoint it scored ------------------------------------


def test_another_runs_checkpoint_is_scored_under_its_own_name(bad, learned_run, tmp_path):
    run = copied_run(bad, tmp_path)
    foreign = learned_run / "checkpoints" / "last.pt"
    own = evaluate(compose_config([f"run_dir={run}"], "evaluate"))
    assert own["name"] == "validation-last-beam4" and own["own_checkpoint"] is True
    assert own["position"] == "sinusoidal" and own["checkpoint_seed"] == 1
    assert own["checkpoint_sha256"] == sha256(run / "checkpoints" / "last.pt")
    before = (run / "eval" / "validation-last-beam4.json").read_bytes()
    scores = evaluate(compose_config([f"run_dir={run}", f"checkpoint={foreign}"], "evaluate"))
    assert scores["name"] == f"validation-last-{sha256(foreign)[:8]}-beam4"
    assert (run / "eval" / "validation-last-beam4.json").read_bytes() == before
    assert scores["own_checkpoint"] is False and scores["checkpoint_sha256"] == sha256(foreign)
    assert scores["position"] == "learned" and scores["checkpoint_file"] == str(foreign)


@pytest.mark.parametrize("other", ["seed=2", "optim.lr_scale=0.5"])
def test_another_runs_checkpoint_copied_into_checkpoints_is_not_the_runs_own(bad, tmp_path, other):
    """The same variant at another seed or rate, its last.pt copied in as other.pt (was:
    own_checkpoint true by its place, and compare counted it as the run's)."""
    twin = tmp_path / "twin"
    train(compose_config([*text_overrides(bad), f"run_dir={twin}", other, "trainer.max_steps=2"]))
    run = copied_run(bad, tmp_path)
    shutil.copyfile(twin / "checkpoints" / "last.pt", run / "checkpoints" / "other.pt")
    state, tag = load_run(run, "other.pt")
    assert state["own_checkpoint"] is False and tag == f"other-{state['file_sha256'][:8]}"
    state, tag = load_run(run, "best")  # the run's own files stay its own
    assert state["own_checkpoint"] is True and tag == "best"


def test_a_copy_of_the_runs_own_weights_elsewhere_is_still_its_own(bad, tmp_path):
    run = bad / "run"
    (tmp_path / "elsewhere").mkdir()
    for name in ("mine.pt", "elsewhere/last.pt"):
        shutil.copyfile(run / "checkpoints" / "last.pt", tmp_path / name)
    state, tag = load_run(run, str(tmp_path / "mine.pt"))  # e.g. an average written out
    assert state["own_checkpoint"] is True and tag == "mine"
    state, tag = load_run(run, str(tmp_path / "elsewhere" / "last.pt"))  # never "last"
    assert state["own_checkpoint"] is True and tag == f"last-{state['file_sha256'][:8]}"


@pytest.mark.parametrize("score", [False, True])
def test_compare_refuses_an_evaluation_of_another_runs_weights(
    bad, learned_run, tmp_path, capsys, score
):
    run = copied_run(bad, tmp_path)
    foreign = learned_run / "checkpoints" / "last.pt"
    name = "validation-last-beam4"  # the name an earlier version let it take, over the run's
    evaluate(  # today's evaluate.py refuses that name for another checkpoint: written, then moved
        compose_config([f"run_dir={run}", f"checkpoint={foreign}", "name=foreign"], "evaluate")
    )
    written = json.loads((run / "eval" / "foreign.json").read_text())
    (run / "eval" / f"{name}.json").write_text(json.dumps(written | {"name": name}))
    (run / "eval" / "foreign.hyp").rename(run / "eval" / f"{name}.hyp")
    (run / "eval" / "foreign.json").unlink()
    extra = ["--score"] if score else []
    message = compare_error([str(run), *extra], capsys)
    assert "another run's checkpoint" in message and str(foreign) in message
    path = run / "eval" / f"{name}.json"
    scores = json.loads(path.read_text())
    scores["own_checkpoint"] = True  # as if the file had been copied into run/checkpoints
    path.write_text(json.dumps(scores))
    message = compare_error([str(run), *extra], capsys)
    assert "position encoding learned" in message and "sinusoidal" in message
    scores.update(position="sinusoidal", checkpoint_seed=7)
    path.write_text(json.dumps(scores))
    assert "seed 7" in compare_error([str(run), *extra], capsys)
    assert not (tmp_path / "run-compare").exists()


# --- (8) a cached tokenizer is the one its key describes ---------------------------------------


def test_a_foreign_tokenizer_in_a_cache_slot_is_trained_again(bad, tmp_path):
    data = compose_config([*text_overrides(bad), f"cache_dir={tmp_path}"]).data
    logged = []
    first = prepare_data(data, tmp_path / "cache", logged.append).tokenizer
    other = compose_config([*text_overrides(bad), "data.vocab_size=90"]).data
    foreign = prepare_data(other, tmp_path / "other", logged.append).tokenizer
    assert foreign.sha256 != first.sha256
    shutil.copyfile(foreign.path, first.path)  # a valid model, in the wrong slot
    again = prepare_data(data, tmp_path / "cache", logged.append).tokenizer
    assert again.path == first.path and again.sha256 == first.sha256
    assert again.vocab_size == 100 and sha256(first.path) == first.sha256
    assert any("training it again" in line for line in logged)
    assert not any("tokenizer loaded from cache" in line for line in logged[-4:])
    assert sorted(p.name for p in first.path.parent.iterdir()) == ["meta.json", MODEL_FILE]


# --- (9) averaging names each checkpoint once --------------------------------------------------


def test_averaging_refuses_one_file_named_twice(bad, tmp_path, capsys):
    last = bad / "run" / "checkpoints" / "last.pt"
    (tmp_path / "link.pt").symlink_to(last)
    detour = bad / "run" / "checkpoints" / ".." / "checkpoints" / "last.pt"
    for inputs in ([last, last], [last, detour], [last, tmp_path / "link.pt"]):
        out = tmp_path / "avg.pt"
        with pytest.raises(SystemExit) as raised:
            average_main(["--out", str(out), *map(str, inputs)])
        assert raised.value.code == 1 and not out.exists()
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("error: ") and "same file" in err[-1], err


def test_averaging_refuses_last_beside_named_files(bad, tmp_path, capsys):
    """Probe p-16: --last (read only with --run-dir) beside named files was ignored."""
    steps = sorted((bad / "run" / "checkpoints").glob("step_*.pt"))
    out = tmp_path / "avg.pt"
    with pytest.raises(SystemExit) as raised:
        average_main(["--out", str(out), "--last", "2", *map(str, steps)])
    err = capsys.readouterr().err.strip().splitlines()
    assert raised.value.code == 1 and not out.exists()
    assert err[-1] == "error: --last 2 counts a --run-dir's step checkpoints: drop it", err


# --- (10) benchmark.py decode on a run: counts checked -----------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--sentences", "-5"],
        ["--sentences", "0"],
        ["--beam", "0"],
        ["--beam", "2000"],  # probe i-8: timed, where evaluate.py refuses it
        ["--beam", "101"],  # wider than the run's 100 subwords
    ],
)
def test_benchmark_decode_refuses_counts_out_of_range(bad, capsys, args):
    with pytest.raises(SystemExit) as raised:
        benchmark_main(["decode", "--run-dir", str(bad / "run"), "--repeats", "1", *args])
    assert raised.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and args[0] in err[-1], err


# --- evaluate.py: contradictions, types, bounds (one line each, nothing written) ---------------


def unsupported_cpu_compute_type() -> str:
    """A CTranslate2 compute type evaluate.py lists that this machine's CPU lacks."""
    import ctranslate2

    supported = ctranslate2.get_supported_compute_types("cpu")
    return next(t for t in COMPUTE_TYPES if t != "default" and t not in supported)


EVALUATE_CASES = {
    "split and src_file": (
        lambda b: ["split=test", f"src_file={b / 'three.en'}"],
        ["split=test", "src_file", "one of them"],
    ),
    "translate and src_file": (
        lambda b: ["translate=true", f"src_file={b / 'three.en'}"],
        ["translate=true", "src_file", "stdin"],
    ),
    "lenpen not a number": (lambda b: ["lenpen=abc"], ["lenpen=abc", "from 0 to 10"]),
    "beam not a number": (lambda b: ["beam=abc"], ["beam=abc", "whole number"]),
    "beam not whole": (lambda b: ["beam=2.5"], ["beam=2.5", "whole number"]),
    "max_len_b not a number": (lambda b: ["max_len_b=abc"], ["max_len_b=abc", "whole number"]),
    "beam without bound": (lambda b: ["beam=100000"], ["beam=100000", "1000"]),
    "beam wider than the vocabulary": (
        lambda b: ["beam=150"],
        ["beam=150", "vocabulary of 100 subwords", "beam=1 to 100"],
    ),
    "compute type this CPU lacks": (
        lambda b: [
            "engine=ctranslate2",
            f"ctranslate2_compute_type={unsupported_cpu_compute_type()}",
        ],
        ["ctranslate2_compute_type=", "not supported on this cpu", "default"],
    ),
    "empty test split": (lambda b: ["split=test_empty"], ["split test_empty has no lines"]),
    "max_tokens below a pair": (  # probe p-12: named training's data.max_tokens, data.max_len
        lambda b: ["max_tokens=3"],
        ["max_tokens=3 is below the longest example", "raise max_tokens"],
    ),
    "over-long reference": (
        lambda b: [
            f"src_file={b / 'three.en'}",
            f"ref_file={b / 'long_ref.de'}",
            "max_input_len=20",
            "max_len_b=10",
        ],
        ["line 2 of", "long_ref.de", "reference"],
    ),
}


@pytest.fixture(scope="module")
def bad_eval(bad):
    """bad's folder, plus a run whose data config has an empty test split and a long reference."""
    words = "the small dog sees a red cat near the house "
    (bad / "long_ref.de").write_text(f"der Hund\n{words * 20}\ndas Haus\n", encoding="utf-8")
    run = bad / "empty_split_run"
    if not run.exists():
        empty = bad / "empty.txt"
        empty.write_text("")
        overrides = [*text_overrides(bad), f"run_dir={run}", "trainer.max_steps=1"]
        overrides += [f"+data.files.test_empty.en={empty}", f"+data.files.test_empty.de={empty}"]
        train(compose_config(overrides))
    return bad


@pytest.mark.parametrize("case", EVALUATE_CASES)
def test_evaluate_refuses_in_one_line(case, bad_eval, tmp_path, monkeypatch):
    make, expected = EVALUATE_CASES[case]
    run = bad_eval / ("empty_split_run" if case == "empty test split" else "run")
    before = sorted((run / "eval").glob("*")) if (run / "eval").is_dir() else []
    cfg = compose_config([f"run_dir={run}", *make(bad_eval)], "evaluate")
    with pytest.raises(UserError) as raised:
        translate_stdin(cfg) if cfg.translate else evaluate(cfg)
    message = str(raised.value)
    assert "\n" not in message
    for text in expected:
        assert text in message, message
    after = sorted((run / "eval").glob("*")) if (run / "eval").is_dir() else []
    assert after == before


def test_evaluate_user_errors_are_one_line_on_the_command_line(bad_eval, tmp_path):
    for make, expected in (EVALUATE_CASES["beam not whole"], EVALUATE_CASES["lenpen not a number"]):
        result = run_cli("evaluate.py", [f"run_dir={bad_eval / 'run'}", *make(bad_eval)])
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert lines[-1].startswith("error: ") and expected[0] in lines[-1], result.stderr


@pytest.mark.parametrize(
    "script, overrides, named",
    [
        ("train.py", ["model.foo=1"], "model.foo: not a key"),
        ("train.py", ["foo=1"], "foo: not a key"),
        ("train.py", ["model=foo"], "Could not find 'model/foo' available options in 'model':"),
        ("evaluate.py", ["run_dir=x", "data.vocab_size=100"], "data.vocab_size: not a key"),
    ],
)
def test_a_command_line_hydra_cannot_compose_is_one_line(script, overrides, named, tmp_path):
    """Hydra's several lines (and its advice to append the key with `+`) become one."""
    result = run_cli(script, [*overrides, f"hydra.run.dir={tmp_path / 'run'}"])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and named in lines[0] and "+" not in lines[0], lines
    assert f"configs/{script.replace('.py', '.yaml')}" in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_a_launcher_key_without_a_sweep_is_one_line(bad, tmp_path):
    """Probe p-40: `+hydra.launcher.timeout_min=5` on a run without -m trained, read by nothing."""
    overrides = [*text_overrides(bad), "trainer.max_steps=1", "+hydra.launcher.timeout_min=5"]
    result = run_cli("train.py", [*overrides, f"hydra.run.dir={tmp_path / 'run'}"])
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines == [
        "error: hydra.launcher.timeout_min: read only by a sweep's launcher (train.py -m ...); "
        "this run launches nothing: remove it"
    ], result.stderr
    assert not (tmp_path / "run").exists()


# --- train.py: settings refused in one line, and effective_tokens=null as documented -----------


@pytest.mark.parametrize(
    "override, expected",
    [
        ("seed=abc", "seed=abc"),
        ("seed=-1", "seed=-1"),
        ("seed=1.5", "seed=1.5"),
        ("data.vocab_size=abc", "data.vocab_size=abc"),
    ],
)
def test_training_settings_of_the_wrong_type_are_one_line(override, expected, bad, tmp_path):
    run = tmp_path / "run"
    with pytest.raises(UserError, match="whole number") as raised:
        train(
            compose_config(
                [*text_overrides(bad), f"run_dir={run}", "trainer.max_steps=1", override]
            )
        )
    assert expected in str(raised.value) and "\n" not in str(raised.value)
    assert not (run / "checkpoints").exists()


def test_effective_tokens_null_is_one_batch_per_update(bad, tmp_path):
    overrides = [*text_overrides(bad), f"run_dir={tmp_path}", "trainer.max_steps=2"]
    metrics = train(compose_config([*overrides, "trainer.effective_tokens=null"]))
    assert metrics["complete"] and metrics["steps"] == 2
    assert metrics["update_freq"] == 1 and metrics["max_tokens"] == 4096  # data.max_tokens


def test_empty_validation_files_are_one_line(bad, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    overrides = text_overrides(bad, validation_en=empty, validation_de=empty)
    with pytest.raises(UserError, match="validation") as raised:
        train(compose_config([*overrides, f"run_dir={tmp_path / 'run'}"]))
    assert "\n" not in str(raised.value)


# --- an end-of-run evaluation killed part-way is made on the rerun -----------------------------


def test_a_missing_end_of_run_evaluation_is_made_on_the_rerun(bad, tmp_path):
    overrides = [*text_overrides(bad), f"run_dir={tmp_path}", "trainer.max_steps=1"]
    cfg = compose_config([*overrides, "trainer.evaluate_at_end=true"])
    train(cfg)
    path = tmp_path / "eval" / "validation-last-beam4.json"
    made = json.loads(path.read_text())
    path.unlink()  # what a kill during the evaluation leaves
    train(cfg)
    again = json.loads(path.read_text())
    assert again["step"] == made["step"] == 1 and again["bleu"] == made["bleu"]


# --- Ctrl-C while an entry point starts --------------------------------------------------------


@pytest.mark.parametrize("script", ["train.py", "evaluate.py"])
@pytest.mark.parametrize("delay", [0.3, 1.0])
def test_ctrl_c_while_starting_is_one_line_and_status_130(script, delay, bad, tmp_path):
    """SIGINT while the imports load (or Hydra composes): no traceback, whatever the moment."""
    if script == "train.py":
        overrides = [*text_overrides(bad), f"hydra.run.dir={tmp_path / 'run'}"]
    else:
        overrides = [f"run_dir={bad / 'run'}", "name=interrupted"]
    process = subprocess.Popen(
        [sys.executable, script, *overrides],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    time.sleep(delay)  # the moment varies; the outcome may not
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=300)
    lines = [line for line in err.splitlines() if line.strip()]
    assert process.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert "interrupted" in lines[-1], err[-3000:]
    assert not (bad / "run" / "eval" / "interrupted.json").exists()


# --- records: the mode any new file gets -------------------------------------------------------


def test_records_get_the_mode_of_any_new_file(bad, tmp_path):
    """Not mkstemp's 0600: a run's metrics, evaluations and tokenizer copy are readable by all."""
    previous = os.umask(0o022)
    try:
        run = tmp_path / "run"
        train(compose_config([*text_overrides(bad), f"run_dir={run}", "trainer.max_steps=1"]))
        evaluate(compose_config([f"run_dir={run}", "split=test"], "evaluate"))
        for path in (run / "metrics.json", run / "data.json", run / "tokenizer" / "spm.model"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
        for path in [*(run / "eval").iterdir(), *(run / "checkpoints").glob("*.pt")]:
            assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    finally:
        os.umask(previous)


# --- a full disk is refused before training, not at the first save ----------------------------


def test_a_disk_without_room_for_a_checkpoint_is_refused_up_front(bad, tmp_path):
    model = tiny_model(ROOT / "configs" / "position" / "sinusoidal.yaml")
    needed = checkpoint_bytes(model)
    weights = sum(p.numel() * 4 for p in model.parameters())
    assert 3 * weights < needed <= 3 * weights + 2**20  # weights and Adam's two moments
    check_space(tmp_path, needed, needed)  # room for one: accepted
    with pytest.raises(UserError, match="MiB free but a checkpoint takes") as raised:
        check_space(tmp_path, needed, needed - 1)
    assert str(tmp_path) in str(raised.value) and "run_dir" in str(raised.value)


# --- a killed encoding leaves nothing behind for ever ------------------------------------------


def test_temporary_files_of_a_killed_encoding_are_removed(bad, tmp_path):
    data = compose_config(text_overrides(bad)).data
    prepare_data(data, tmp_path, lambda line: None)
    encoded = tmp_path / "encoded"
    kept = sorted(p.name for p in encoded.iterdir())
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()  # a process now gone
    staging = encoded / f".staging-{socket.gethostname()}-{dead}-{kept[0]}"
    staging.mkdir()  # where an encoding writes until it is complete; datasets' tmp files go there
    (staging / "tmpk1ll3d").write_bytes(b"half an Arrow file")  # what datasets leaves on SIGKILL
    shutil.rmtree(encoded / kept[0])  # so that split is encoded again, by a new process
    again = prepare_data(data, tmp_path, lambda line: None)
    assert sorted(p.name for p in encoded.iterdir()) == kept
    assert len(again.splits["validation"]) == 20

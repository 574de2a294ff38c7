"""The new-user replay (docs/replay.md): each mistake tried by hand on a fresh checkout, replayed.

Every case runs in-process through the real entry (training.launch.train, evaluate, a script's
main) on tests/e2e/test_reliability.py's tiny corpus and 2-step run: it must be refused with one
`error:` line naming the key or file (or give the correct result), and write nothing. The cases
fixed by the replay (a 0-layer decoder trained, `trainer.compile=maybe` compiled, RoPE's
`position.base=-1` diverged and blamed the learning rate, `optim.betas`, `model.dropout=abc`,
`optim.label_smoothing=abc` and `data.max_ratio=abc` were tracebacks) fail on the code before it.
"""

import io
import shutil
import sys

import pytest
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from common.errors import UserError
from evaluation.evaluate import evaluate, translate_stdin
from tests.conftest import compose_config, script_main
from tests.e2e import test_reliability as reliability
from tests.e2e.test_reliability import text_overrides
from training.launch import train

bad = reliability.bad  # the fixture: corpora (good and broken) and a 2-step run, one folder
compare_main = script_main("compare")

# override(s) -> texts the one line must contain; refused before any data is read
SETTINGS = {
    "optim.betas=[0.9]": ["optim.betas=[0.9]", "two numbers"],
    "optim.betas=[0.9,1.5]": ["optim.betas=[0.9, 1.5]", "below 1"],
    "optim.betas=abc": ["optim.betas=abc", "[0.9,0.98]"],
    "optim.label_smoothing=abc": ["optim.label_smoothing=abc", "from 0 to below 1"],
    "optim.clip_norm=abc": ["optim.clip_norm=abc", "or null"],
    "optim.clip_norm=-1": ["optim.clip_norm=-1", "or null"],
    "optim.lr_scale=0": ["optim.lr_scale=0"],
    "optim.lr_scale=abc": ["optim.lr_scale=abc"],
    "optim.eps=-1": ["optim.eps=-1"],
    "model.dropout=1.5": ["model.dropout=1.5", "from 0 to below 1"],
    "model.dropout=-0.1": ["model.dropout=-0.1", "from 0 to below 1"],
    "model.dropout=abc": ["model.dropout=abc"],
    "model.n_heads=0": ["model.n_heads=0", "whole number >= 1"],
    "model.n_encoder_layers=0": ["model.n_encoder_layers=0", "whole number >= 1"],
    "model.n_decoder_layers=-1": ["model.n_decoder_layers=-1", "whole number >= 1"],
    "model.d_model=0": ["model.d_model=0"],
    "model.d_model=abc": ["model.d_model=abc"],
    "model.d_ff=0": ["model.d_ff=0"],
    "model.max_positions=0": ["model.max_positions=0"],
    "model.layer_norm_eps=-1": ["model.layer_norm_eps=-1"],
    "data.max_len=0": ["data.max_len=0", ">= 2"],
    "data.max_len=abc": ["data.max_len=abc"],
    "data.tokenizer_sample=0": ["data.tokenizer_sample=0"],
    "data.tokenizer_seed=-1": ["data.tokenizer_seed=-1", "whole number >= 0"],  # probe 15-20
    "data.vocab_size=4": ["data.vocab_size=4", ">= 5"],
    "data.max_tokens=0": ["data.max_tokens=0"],
    "trainer.compile=maybe": ["trainer.compile=maybe", "true or false"],
    "trainer.start_over=maybe": ["trainer.start_over=maybe", "true or false"],
    "trainer.evaluate_at_end=yes": ["trainer.evaluate_at_end=yes", "true or false"],
    "trainer.max_steps=abc": ["trainer.max_steps=abc"],
    "trainer.max_steps=0": ["trainer.max_steps=0"],
    "trainer.max_steps=2.5": ["trainer.max_steps=2.5", "whole number"],
    "trainer.keep_last=0": ["trainer.keep_last=0"],
    "trainer.num_threads=0": ["trainer.num_threads=0"],
    "trainer.max_epochs=0": ["trainer.max_epochs=0"],
    "trainer.effective_tokens=0": ["trainer.effective_tokens=0"],
    "trainer.save_every_steps=0": ["trainer.save_every_steps=0"],
    "trainer.save_every_minutes=-1": ["trainer.save_every_minutes=-1"],
    "trainer.eval_bleu_sentences=-1": ["trainer.eval_bleu_sentences=-1"],
    "trainer.dist_timeout_minutes=0": ["trainer.dist_timeout_minutes=0"],
    "trainer.precision=fp8": ["trainer.precision=fp8", "auto, bf16, fp16 or fp32"],
}
# override(s) -> texts of the one line; refused once the corpus or the model is built
LATER = {
    "data.num_proc=0": (["data.num_proc=0"], ["data.num_proc=0", "auto"]),
    "data.num_proc=abc": (["data.num_proc=abc"], ["data.num_proc=abc", "auto"]),
    "data.max_ratio=0": (["data.max_ratio=0"], ["data.max_ratio", ">= 1 or null"]),
    "data.max_ratio=abc": (["data.max_ratio=abc"], ["data.max_ratio", "got abc"]),
    "data.max_len=1": (["data.max_len=1"], ["data.max_len", "subwords + EOS"]),
    "data.train_max_src_words=0": (["data.train_max_src_words=0"], ["train_max_src_words"]),
    "data.train_max_src_words=x": (["data.train_max_src_words=x"], ["train_max_src_words", "x"]),
    "data.tgt_lang=en": (["data.tgt_lang=en"], ["data.src_lang and data.tgt_lang", "'en'"]),
    "data.train_join_share=1.5": (["data.train_join_share=1.5"], ["data.train_join_share=1.5"]),
    "data.train_join_max=1": (
        ["data.train_join_share=0.5", "data.train_join_max=1"],
        ["data.train_join_max=1", "at least 2"],
    ),
    "rope position.base=-1": (["position=rope", "position.base=-1"], ["position.base=-1"]),
    "sinusoidal position.base=abc": (["position.base=abc"], ["position.base=abc", "above 1"]),
    "sinusoidal position.base=1": (["position.base=1"], ["position.base=1", "above 1"]),
    "rope position.scaling=bogus": (
        ["position=rope", "position.scaling=bogus"],
        ["scaling=bogus", "linear, ntk or null"],
    ),
    "rope position.factor=abc": (["position=rope", "position.factor=abc"], ["factor=abc"]),
    "rope position.factor=0.5": (["position=rope", "position.factor=0.5"], ["factor=0.5"]),
    "t5 position.num_buckets=0": (
        ["position=t5", "position.num_buckets=0"],
        ["position.num_buckets=0", "at least 4 buckets"],
    ),
    "t5 position.max_distance=0": (
        ["position=t5", "position.max_distance=0"],
        ["max_distance=0", "at least 4 buckets"],
    ),
    "rope with an odd head size": (
        ["position=rope", "model.d_model=36", "model.n_heads=4"],
        ["position=rope", "even head size"],
    ),
}
# a typo on the command line: Hydra refuses it while composing, naming what it could not find
TYPOS = {
    "trainer.max_step=5": "max_step",
    "positon=learned": "positon",
    "experiment=quickstrat": "quickstrat",
    "model=huge": "model/huge",
    "data=wmt16": "data/wmt16",
    "optim=adam": "optim/adam",
    "trainer=fast": "trainer/fast",
    "+trainer.max_steps=5": "max_steps",
    "model.dropout": "model.dropout",
}


def refused(overrides: list[str], run_dir) -> str:
    """train()'s one-line UserError for overrides; the run directory is left without records."""
    with pytest.raises(UserError) as raised:  # 2 steps: a case that is not refused ends soon
        train(compose_config(["trainer.max_steps=2", *overrides, f"run_dir={run_dir}"]))
    message = str(raised.value)
    assert "\n" not in message, message
    assert not (run_dir / "metrics.json").exists() and not (run_dir / "checkpoints").exists()
    assert not (run_dir / ".hydra").exists()
    return message


@pytest.mark.parametrize("override", SETTINGS)
def test_a_setting_out_of_range_is_one_line_naming_the_key(override, bad, tmp_path):
    message = refused([*text_overrides(bad), override], tmp_path / "run")
    for text in SETTINGS[override]:
        assert text in message, message


@pytest.mark.parametrize("case", LATER)
def test_a_data_or_position_setting_out_of_range_is_one_line(case, bad, tmp_path):
    overrides, expected = LATER[case]
    message = refused([*text_overrides(bad), *overrides], tmp_path / "run")
    for text in expected:
        assert text in message, message


@pytest.mark.parametrize("override", TYPOS)
def test_a_typo_on_the_command_line_names_what_was_not_found(override, bad):
    with pytest.raises((HydraException, OmegaConfBaseException)) as raised:
        compose_config([*text_overrides(bad), override])
    assert TYPOS[override] in str(raised.value), str(raised.value)


# --- evaluate.py on bad's 2-step run ------------------------------------------------------------

# overrides given bad's folder -> texts the one line must contain
EVALUATE = {
    "run_dir that does not exist": (
        lambda b: [f"run_dir={b / 'nope'}"],
        ["nope", "does not exist"],
    ),
    "run_dir that is a file": (
        lambda b: [f"run_dir={b / 'three.en'}"],
        ["three.en", "is a file, not a folder"],
    ),
    "checkpoint=step_999.pt": (lambda b: ["checkpoint=step_999.pt"], ["step_999.pt", "not exist"]),
    "checkpoint=lats": (lambda b: ["checkpoint=lats"], ["checkpoint lats", "does not exist"]),
    "checkpoint=avg:99": (lambda b: ["checkpoint=avg:99"], ["avg:99", "pass a smaller N"]),
    "checkpoint=avg:0": (lambda b: ["checkpoint=avg:0"], ["avg:0", "positive integer"]),
    "checkpoint=avg:abc": (lambda b: ["checkpoint=avg:abc"], ["avg:abc", "positive integer"]),
    "checkpoint=avg:-2": (lambda b: ["checkpoint=avg:-2"], ["avg:-2", "positive integer"]),
    "checkpoint a text file": (
        lambda b: [f"checkpoint={b / 'three.en'}"],
        ["three.en", "unreadable or unsafe"],
    ),
    "checkpoint a folder": (
        lambda b: [f"checkpoint={b / 'run' / 'checkpoints'}"],
        ["checkpoints", "is a folder, not a file"],
    ),
    "split=tset": (lambda b: ["split=tset"], ["'tset'", "available splits are"]),
    "src_file missing": (lambda b: [f"src_file={b / 'nope.en'}"], ["src_file=", "not found"]),
    "src_file a folder": (lambda b: [f"src_file={b}"], ["src_file=", "is not a file"]),
    "ref_file missing": (
        lambda b: [f"src_file={b / 'three.en'}", f"ref_file={b / 'nope.de'}"],
        ["ref_file=", "nope.de", "not found"],
    ),
    "ref_file shorter than src_file": (
        lambda b: [f"src_file={b / 'three.en'}", f"ref_file={b / 'one.de'}"],
        ["has 3 lines", "has 1", "line-aligned"],
    ),
    "ref_file without src_file": (
        lambda b: [f"ref_file={b / 'one.de'}"],
        ["ref_file is set without src_file"],
    ),
    "beam=0": (lambda b: ["beam=0"], ["beam=0", "from 1 (greedy)"]),
    "beam=-1": (lambda b: ["beam=-1"], ["beam=-1", "from 1 (greedy)"]),
    "max_len_b=-1": (lambda b: ["max_len_b=-1"], ["max_len_b=-1", "whole number"]),
    "min_len=-1": (lambda b: ["min_len=-1"], ["min_len=-1", "from 0"]),
    "max_input_len=0": (lambda b: ["max_input_len=0"], ["max_input_len=0"]),
    "max_tokens=0": (lambda b: ["max_tokens=0"], ["max_tokens=0"]),
    "max_tokens=abc": (lambda b: ["max_tokens=abc"], ["max_tokens=abc"]),
    "long_inputs=drop": (lambda b: ["long_inputs=drop"], ["long_inputs=drop", "error or skip"]),
    "precision=fp8": (lambda b: ["precision=fp8"], ["precision=fp8", "auto, bf16, fp16 or fp32"]),
    "engine=onnx": (lambda b: ["engine=onnx"], ["engine=onnx", "ctranslate2"]),
    "name=a/b": (lambda b: ["name=a/b"], ["name=a/b", "plain file name"]),
    "translate=maybe": (lambda b: ["translate=maybe"], ["translate=maybe", "true"]),
    "translate=true with ref_file": (
        lambda b: ["translate=true", f"ref_file={b / 'one.de'}"],
        ["ref_file"],
    ),
}


@pytest.mark.parametrize("case", EVALUATE)
def test_an_evaluation_mistake_is_one_line_and_writes_nothing(case, bad, monkeypatch):
    make, expected = EVALUATE[case]
    (bad / "one.de").write_text("der Hund\n", encoding="utf-8")
    run = bad / "run"
    before = sorted((run / "eval").glob("*")) if (run / "eval").is_dir() else []
    overrides = make(bad)
    if not any(o.startswith("run_dir=") for o in overrides):
        overrides.append(f"run_dir={run}")
    cfg = compose_config(overrides, "evaluate")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"the dog\n")))
    with pytest.raises(UserError) as raised:
        translate_stdin(cfg) if cfg.translate is True else evaluate(cfg)
    message = str(raised.value)
    assert "\n" not in message, message
    for text in expected:
        assert text in message, message
    assert (sorted((run / "eval").glob("*")) if (run / "eval").is_dir() else []) == before


# stdin -> the number of output lines: one for each input line, empty for a blank one
STDIN = {
    "empty stdin": (b"", 0),
    "blank lines": (b"\n\n", 2),
    "CRLF line ends": (b"the dog\r\nthe cat\r\n", 2),
    "a NUL byte in a line": (b"the\x00dog\n", 1),
    "no final newline": (b"the dog\nthe cat", 2),
}


@pytest.mark.parametrize("case", STDIN)
def test_stdin_translation_gives_one_line_for_each_line(case, bad, monkeypatch, capsys):
    data, lines = STDIN[case]
    cfg = compose_config([f"run_dir={bad / 'run'}", "translate=true", "beam=1"], "evaluate")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    translate_stdin(cfg)
    out = capsys.readouterr().out
    assert out.count("\n") == lines, repr(out)
    if case == "blank lines":
        assert out == "\n\n"


# --- the scripts: compare.py, average_checkpoints.py, export_hf.py, benchmark.py, study.py -------


def script_refuses(main, args: list[str], capsys) -> str:
    """A script's one `error:` line for args: exit status 1, no traceback."""
    with pytest.raises(SystemExit) as raised:
        main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert raised.value.code == 1 and err, err
    assert err[-1].startswith("error: ") and "Traceback" not in "\n".join(err), err
    return err[-1]


@pytest.fixture(scope="module")
def learned_replay(bad):
    """A 1-step run like bad's with a learned position table (averaging and export refuse it)."""
    run_dir = bad / "learned_replay"
    if not (run_dir / "metrics.json").is_file():
        overrides = [*text_overrides(bad), f"run_dir={run_dir}", "position=learned"]
        train(compose_config([*overrides, "trainer.max_steps=1"]))
    return run_dir


@pytest.fixture(scope="module")
def scored(bad, learned_replay):
    """A copy of bad's run and the learned run, each evaluated (validation-last-beam1)."""
    run = bad / "scored_run"
    if not run.exists():
        shutil.copytree(bad / "run", run)
        for path in (run, learned_replay):
            evaluate(compose_config([f"run_dir={path}", "beam=1"], "evaluate"))
    return run


# args given (bad's folder, the scored run) -> texts of the one line
COMPARE = {
    "a folder without runs": (lambda b, r: [str(b / "cache")], ["no run directories"]),
    "a folder that does not exist": (lambda b, r: [str(b / "nope")], ["nope", "not a directory"]),
    "a file": (lambda b, r: [str(b / "three.en")], ["three.en", "not a directory"]),
    "an unevaluated run": (lambda b, r: [str(b / "run")], ["eval/validation", "--score"]),
    "--eval of a name never made": (
        lambda b, r: [str(r), "--eval", "nosuch"],
        ["nosuch.json is missing", "name=nosuch"],
    ),
    "--resamples -1": (lambda b, r: [str(r), "--resamples", "-1"], ["--resamples -1"]),
    "--refs that does not exist": (
        lambda b, r: [str(r), str(b / "learned_replay"), "--refs", str(b / "nope.de")],
        ["--refs", "nope.de", "not a file"],
    ),
    "--refs of another length": (
        lambda b, r: [str(r), str(b / "learned_replay"), "--refs", str(b / "three.en")],
        ["--refs", "has 3 lines", "hypotheses"],
    ),
}


@pytest.mark.parametrize("case", COMPARE)
def test_a_compare_mistake_is_one_line_and_writes_nothing(case, bad, scored, tmp_path, capsys):
    make, expected = COMPARE[case]
    args = [*make(bad, scored), "--out", str(tmp_path / "compare")]
    if "--resamples" not in args:
        args += ["--resamples", "10"]
    line = script_refuses(compare_main, args, capsys)
    for text in expected:
        assert text in line, line
    assert not (tmp_path / "compare").exists()


# args given bad's folder and tmp_path -> texts of the one line
SCRIPTS = {
    "average: --last 99": (
        "average_checkpoints",
        lambda b, t: ["--run-dir", str(b / "run"), "--last", "99", "--out", str(t / "a.pt")],
        ["--last 99", "smaller N"],
    ),
    "average: --last 0": (
        "average_checkpoints",
        lambda b, t: ["--run-dir", str(b / "run"), "--last", "0", "--out", str(t / "a.pt")],
        ["--last 0", "positive"],
    ),
    "average: no inputs": (
        "average_checkpoints",
        lambda b, t: ["--out", str(t / "a.pt")],
        ["--run-dir"],
    ),
    "average: a file that does not exist": (
        "average_checkpoints",
        lambda b, t: ["--out", str(t / "a.pt"), str(b / "nope.pt"), str(b / "nope2.pt")],
        ["nope.pt", "does not exist"],
    ),
    "average: --out over a training name": (
        "average_checkpoints",
        lambda b, t: [
            "--out",
            str(t / "last.pt"),
            *[str(b / "run" / "checkpoints" / "last.pt")] * 1,
        ],
        ["last.pt", "training's own names"],
    ),
    "average: runs of two position encodings": (
        "average_checkpoints",
        lambda b, t: [
            "--out",
            str(t / "a.pt"),
            str(b / "run" / "checkpoints" / "last.pt"),
            str(b / "learned_replay" / "checkpoints" / "last.pt"),
        ],
        ["different settings", "position._target_"],
    ),
    "export: a run that does not exist": (
        "export_hf",
        lambda b, t: ["--run-dir", str(b / "nope"), "--out", str(t / "hf")],
        ["nope", "does not exist"],
    ),
    "export: --out not empty": (
        "export_hf",
        lambda b, t: ["--run-dir", str(b / "run"), "--out", str(b / "run")],
        ["--out", "not empty"],
    ),
    "export: a learned table": (
        "export_hf",
        lambda b, t: ["--run-dir", str(b / "learned_replay"), "--out", str(t / "hf")],
        ["no Hugging Face Marian equivalent", "position=sinusoidal"],
    ),
    "export: --max-positions 0": (
        "export_hf",
        lambda b, t: ["--run-dir", str(b / "run"), "--out", str(t / "hf"), "--max-positions", "0"],
        ["--max-positions 0", "at least 2"],
    ),
    "export: --checkpoint avg:99": (
        "export_hf",
        lambda b, t: [
            "--run-dir",
            str(b / "run"),
            "--out",
            str(t / "hf"),
            "--checkpoint",
            "avg:99",
        ],
        ["avg:99", "smaller N"],
    ),
}


@pytest.mark.parametrize("case", SCRIPTS)
def test_a_script_mistake_is_one_line_and_writes_nothing(
    case, bad, learned_replay, tmp_path, capsys
):
    script, make, expected = SCRIPTS[case]
    line = script_refuses(script_main(script), make(bad, tmp_path), capsys)
    for text in expected:
        assert text in line, line
    assert sorted(tmp_path.iterdir()) == []


# args given tmp_path -> texts of the one line; refused before any run trains
EXTRAPOLATION_AND_BENCHMARK = {
    "extrapolation: --variants fourier": (
        "extrapolation",
        lambda t: ["--variants", "fourier", "--out", str(t / "x")],
        ["fourier", "sinusoidal"],
    ),
    "extrapolation: --max-words 0": (
        "extrapolation",
        lambda t: ["--max-words", "0", "--out", str(t / "x")],
        ["--max-words 0"],
    ),
    "extrapolation: --bucket-width 0": (
        "extrapolation",
        lambda t: ["--bucket-width", "0", "--out", str(t / "x")],
        ["--bucket-width 0"],
    ),
    "extrapolation: --beam 0": (
        "extrapolation",
        lambda t: ["--beam", "0", "--out", str(t / "x")],
        ["--beam 0"],
    ),
    "extrapolation: --minutes -1": (
        "extrapolation",
        lambda t: ["--minutes", "-1", "--out", str(t / "x")],
        ["--minutes -1"],
    ),
    "extrapolation: --seeds -1": (
        "extrapolation",
        lambda t: ["--seeds", "-1", "--out", str(t / "x")],
        ["--seeds -1", ">= 0"],
    ),
    "extrapolation: a mistyped override": (
        "extrapolation",
        lambda t: ["--out", str(t / "x"), "trainer.max_step=3"],
        ["trainer.max_step"],
    ),
    "study plateau: --threshold -1": (
        "study",
        lambda t: ["plateau", "--runs", str(t / "x"), "--threshold", "-1", "--out", str(t / "p")],
        ["--threshold -1"],
    ),
    "study report: --resamples -1": (
        "study",
        lambda t: ["report", "--root", str(t / "x"), "--resamples", "-1", "--out", str(t / "r")],
        ["--resamples -1"],
    ),
    "study report: a root without runs": (
        "study",
        lambda t: ["report", "--root", str(t / "x"), "--out", str(t / "r")],
        ["no scored runs", "--root"],
    ),
    "benchmark decode: --batch-size 0": (
        "benchmark",
        lambda t: ["decode", "--batch-size", "0"],
        ["--batch-size 0"],
    ),
    "benchmark decode: --threads 0": (
        "benchmark",
        lambda t: ["decode", "--threads", "0"],
        ["--threads 0"],
    ),
    "benchmark decode: --length 0": (
        "benchmark",
        lambda t: ["decode", "--length", "0"],
        ["--length 0"],
    ),
    "benchmark decode: --repeats 0": (
        "benchmark",
        lambda t: ["decode", "--repeats", "0"],
        ["--repeats 0"],
    ),
    "benchmark decode: --model huge": (
        "benchmark",
        lambda t: ["decode", "--model", "huge", "--sentences", "2"],
        ["huge.yaml"],
    ),
    "benchmark train: --variants fourier": (
        "benchmark",
        lambda t: ["train", "--variants", "fourier"],
        ["fourier", "sinusoidal"],
    ),
    "benchmark train: --vocab-size -5": (
        "benchmark",
        lambda t: ["train", "--vocab-size", "-5"],
        ["--vocab-size -5"],
    ),
    "benchmark data: --pairs 0": (
        "benchmark",
        lambda t: ["data", "--pairs", "0", "--workdir", str(t / "w")],
        ["--pairs 0"],
    ),
}


@pytest.mark.parametrize("case", EXTRAPOLATION_AND_BENCHMARK)
def test_an_extrapolation_or_benchmark_mistake_is_one_line(case, tmp_path, capsys):
    script, make, expected = EXTRAPOLATION_AND_BENCHMARK[case]
    line = script_refuses(script_main(script), make(tmp_path), capsys)
    for text in expected:
        assert text in line, line
    assert sorted(tmp_path.iterdir()) == []


def test_data_path_naming_a_file_says_it_is_a_file(bad, tmp_path):
    overrides = ["experiment=multi30k_small", f"data.path={bad / 'three.en'}"]
    message = refused([*overrides, f"cache_dir={tmp_path / 'cache'}"], tmp_path / "run")
    assert "three.en" in message and "is a file, not a folder" in message, message

"""runs.Run, the one owner of a run directory: the current rule, its own translations checked,
older formats read as today's, and a scan that nothing else opens a run's files by hand."""

import ast
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from common.files import file_sha256, write_json
from runs.record import start_segment
from runs.run import (
    Run,
    RunFileError,
    lines_sha256,
    run_id,
    search_settings,
    training_file_name,
)
from tests.conftest import ROOT


def fake_checkpoint(run: Run, name: str, content: bytes) -> str:
    """A file in the run's checkpoints/ (the rule reads only its bytes); its sha256."""
    run.checkpoints.mkdir(parents=True, exist_ok=True)
    run.checkpoint_file(name).write_bytes(content)
    return file_sha256(run.checkpoint_file(name))


def test_an_evaluation_of_best_is_current_while_best_pt_is_unchanged(tmp_path):
    run = Run(tmp_path)
    run.write_metrics({"steps": 100})
    scores = {"step": 60, "checkpoint_file": "best.pt"}
    scores["checkpoint_sha256"] = fake_checkpoint(run, "best", b"weights of step 60")
    assert run.is_current(scores)  # older than the last step, yet these weights are best.pt's
    fake_checkpoint(run, "best", b"weights of step 80")  # a better checkpoint since
    assert not run.is_current(scores)


def test_an_evaluation_of_last_pt_is_current_only_at_the_last_step(tmp_path):
    run = Run(tmp_path)
    run.write_metrics({"steps": 100})
    scores = {"step": 60, "checkpoint_file": "last.pt"}
    scores["checkpoint_sha256"] = fake_checkpoint(run, "last", b"weights of step 60")
    assert not run.is_current(scores)  # step 60's file copied over last.pt (probe b-2)
    assert run.is_current({**scores, "step": 100})


def test_without_the_scored_file_an_evaluation_is_current_at_the_last_step(tmp_path):
    run = Run(tmp_path)  # a record keeps no checkpoints
    run.write_metrics({"steps": 100})
    scored = {"step": 100, "checkpoint_file": "last.pt", "checkpoint_sha256": "ab" * 32}
    assert run.is_current(scored)
    assert not run.is_current({**scored, "step": 80})
    assert not run.is_current({"checkpoint_file": "last.pt"})  # no step recorded: not current
    assert run.is_current({**scored, "step": 80}, last_step=80)  # the caller's last step


def test_hypotheses_are_the_runs_own_file_checked_by_count_and_hash(tmp_path):
    run = Run(tmp_path)
    scores = {"name": "test-last-beam4", "n_sentences": 2, "hypotheses_sha256": None}
    scores["hypotheses_sha256"] = lines_sha256(["a b", "c"])
    run.write_evaluation("test-last-beam4", ["a b", "c"], scores)
    assert run.evaluation("test-last-beam4") == scores
    assert run.hypotheses(scores, "fix it") == ["a b", "c"]
    run.hypotheses_file("test-last-beam4").write_text("a b\nd\n", encoding="utf-8")  # edited
    with pytest.raises(RunFileError, match="another sha256.*: fix it"):
        run.hypotheses(scores, "fix it")
    run.hypotheses_file("test-last-beam4").write_text("a b\n", encoding="utf-8")  # truncated
    with pytest.raises(RunFileError, match=r"1 lines, 2 scored"):
        run.hypotheses({**scores, "hypotheses_sha256": None}, "fix it")


def test_an_evaluation_clears_only_the_temporaries_of_gone_writers(tmp_path):
    """Probe r-20, r-27: each evaluation deleted every `.<name>.*.tmp` in eval/, a live
    writer's too (two evaluations of one name at once), and its own temporaries named no
    writer, so none could be told from a live one's."""
    import os
    import socket

    run, host = Run(tmp_path), socket.gethostname()
    eval_dir = run.evaluations_dir
    eval_dir.mkdir()
    live = eval_dir / f".t.hyp.{host}@{os.getpid()}.ab12cd34.tmp"
    dead = eval_dir / f".t.json.{host}@999999999.ef56gh78.tmp"
    older = eval_dir / ".t.hyp.k2j4m6n8.tmp"  # from before names carried the writer
    for path in (live, dead, older):
        path.write_text("half\n")
    scores = {"name": "t", "n_sentences": 1, "hypotheses_sha256": lines_sha256(["a"])}
    run.write_evaluation("t", ["a"], scores)
    assert sorted(p.name for p in eval_dir.iterdir()) == sorted(["t.hyp", "t.json", live.name])


def test_an_evaluation_never_writes_through_a_linked_eval_folder(tmp_path):
    """Probe 1-25: eval/ a link to a user's folder: their s30.hyp was replaced."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "t.hyp").write_text("mine\n")
    run = Run(tmp_path / "run")
    run.path.mkdir()
    run.evaluations_dir.symlink_to(mine)
    scores = {"name": "t", "n_sentences": 1, "hypotheses_sha256": lines_sha256(["a"])}
    with pytest.raises(RunFileError, match=r"eval is a link \(to .*mine\): a run keeps"):
        run.write_evaluation("t", ["a"], scores)
    assert sorted(p.name for p in mine.iterdir()) == ["t.hyp"]
    assert (mine / "t.hyp").read_text() == "mine\n"


def test_older_formats_read_as_todays():
    run = Run("unused")
    old = {"position": "SinusoidalPositionEncoding"}  # before position_choice was recorded
    names = {"SinusoidalPositionEncoding": "sinusoidal"}
    assert run.variant(old, None, names) == "sinusoidal"
    assert run.variant(old, {"position": "rope"}, names) == "rope"
    assert run.variant({"position": "RotaryPositionEncoding"}, None, {}) == "rotary"
    assert run.variant({**old, "position_choice": "learned"}, None, names) == "learned"
    settings = search_settings({"beam": 4, "lenpen": 0.6, "max_len_b": 50})
    assert (settings["engine"], settings["min_len"], settings["position_override"]) == (
        "ours",
        0,
        {},
    )


def test_metrics_and_config_refuse_in_one_line_where_missing(tmp_path):
    run = Run(tmp_path)
    with pytest.raises(RunFileError, match="metrics.json is missing: the run has not finished"):
        run.metrics()
    with pytest.raises(RunFileError, match="config.yaml is missing"):
        run.config()
    assert run.finished_metrics() is None and run.setting("optim.lr_scale") is None
    run.write_metrics({"steps": 5, "complete": False})  # stopped by a time limit
    assert run.finished_metrics() is None and run.metrics()["steps"] == 5


def test_training_file_names():
    assert all(map(training_file_name, ["last.pt", "best.pt", "step_250.pt"]))
    assert not any(map(training_file_name, ["avg5.pt", "last.pt.bak", "mine.pt"]))


# -- nobody else opens a run's files by hand
RUN_FOLDERS = {"eval", "checkpoints", "tensorboard", ".hydra", "tokenizer"}
RUN_FILES = {"metrics.json", "segments.json", "data.json", "train.log", "last.pt", "best.pt"}
RUN_FILES |= {".hydra/config.yaml", "config.yaml"}
# studies/migration.py reads the record store's older layouts once, to rewrite them as today's
# (a committed migration: what it reads is by definition not today's run directory).
OWNERS = {"runs", "studies/migration.py"}


def hand_opened(source: str) -> list[tuple[int, str]]:
    """(line, name) of each run file or folder named in a path join or as a bare string."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                text = side.value if isinstance(side, ast.Constant) else None
                if isinstance(side, ast.JoinedStr) and isinstance(side.values[0], ast.Constant):
                    text = side.values[0].value
                if (
                    isinstance(text, str)
                    and text.strip("/").split("/")[0] in RUN_FOLDERS | RUN_FILES
                ):
                    found.append((node.lineno, text))
        if isinstance(node, ast.Constant) and node.value in RUN_FILES:
            found.append((node.lineno, node.value))
    return sorted(set(found))


def library_files() -> list[Path]:
    skipped = {".venv", "tests", "outputs", "multirun", "build", ".git", ".cache"}
    return [
        p
        for p in sorted(ROOT.rglob("*.py"))
        if not skipped & set(p.relative_to(ROOT).parts)
        and not any(p.relative_to(ROOT).as_posix().startswith(owner) for owner in OWNERS)
    ]


def test_the_scan_finds_a_hand_opened_run_file():
    source = (
        'x = run_dir / "eval" / f"{name}.json"\ny = run / f"eval/{n}.hyp"\nz = "metrics.json"\n'
    )
    assert [line for line, _ in hand_opened(source)] == [1, 2, 3]
    assert hand_opened('message = f"{path} has no metrics.json: wait for it"\n') == []


def test_no_module_but_runs_opens_a_run_directorys_files():
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {name!r}"
        for path in library_files()
        for line, name in hand_opened(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "read and write them through runs.run.Run: " + "; ".join(offenders)


def test_no_other_run_class_beside_runs_run():
    others = [
        str(path.relative_to(ROOT))
        for path in library_files()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.name == "Run"
    ]
    assert others == []


# -- identity by content
def identity_config(seed: int = 1, where: str = "/data/a", lr: float = 1.0) -> dict:
    return {
        "seed": seed,
        "run_dir": f"{where}/run",
        "cache_dir": f"{where}/cache",
        "optim": {"lr_scale": lr},
        "trainer": {"max_steps": 2000, "num_threads": 1},
        "data": {"path": where, "corpus": {"path": where, "langs": ["en", "fr"]}},
    }


SUMMARY = {"fingerprints": {"text": {"train": {"sha256": "aa"}}, "tokenizer_sha256": "bb"}}


def test_run_id_is_what_was_trained_not_where_it_lies():
    first = run_id(identity_config(), SUMMARY)
    assert len(first) == 16
    moved = identity_config(where="/elsewhere")  # another machine's paths, a copy, a record
    extended = identity_config()
    extended["trainer"] = {"max_steps": 8000, "num_threads": 2}  # a resume may change these
    assert run_id(moved, SUMMARY) == run_id(extended, SUMMARY) == first
    assert run_id(identity_config(seed=2), SUMMARY) != first
    assert run_id(identity_config(lr=0.5), SUMMARY) != first
    other_text = {"fingerprints": {"text": {"train": {"sha256": "cc"}}, "tokenizer_sha256": "bb"}}
    assert run_id(identity_config(), other_text) != first
    # the arithmetic it trained in (was: an fp16 run and its fp32 twin were "one run")
    assert run_id(identity_config(), SUMMARY, "fp32") == first
    halves = {run_id(identity_config(), SUMMARY, p) for p in ("fp16", "bf16")}
    assert len(halves) == 2 and first not in halves


def test_a_runs_identity_is_the_recorded_one_else_derived(tmp_path):
    run = Run(tmp_path)
    assert run.identity() is None  # no config: nothing to derive it from
    run.write_config(OmegaConf.create(identity_config(where=str(tmp_path))))
    write_json(run.data_file, SUMMARY)
    derived = run.identity()
    assert derived == run_id(run.resolved_config(), SUMMARY)
    start_segment(tmp_path, 0, [], [], run_id="0123456789abcdef")
    assert run.identity() == "0123456789abcdef"
    start_segment(tmp_path, 10, [], [])  # a resume keeps it
    assert run.identity() == "0123456789abcdef" and len(run.segments()) == 2

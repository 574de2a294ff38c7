"""A tiny declared study through one command: killed mid-way, resumed, then a no-op."""

import hashlib
import inspect
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from runs.checkpoint import load_checkpoint
from studies.finals import read_scores
from studies.protocol import load_study
from studies.stages import RATE_FIGURE, SUMMARY
from studies.store import Point, read_record, record_dir, work_dir
from tests.conftest import ROOT, script_main

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")


def tiny_study(
    folder: Path,
    name: str = "tiny",
    variants: tuple[str, ...] = ("sinusoidal",),
    train_size: int = 3000,
) -> Path:
    """Each variant at one grid rate x 2 seeds at 40 steps, the check's 2 seeds at 50 (the
    finals, scored at the last checkpoint and the average of the last 2)."""
    study = {
        "name": name,
        "experiment": "quickstart",
        "overrides": [
            f"data.corpus.train_size={train_size}",
            "+data.corpus.validation_size=61",
            "+data.corpus.test_size=61",
            "data.vocab_size=400",
            "data.max_tokens=1024",
            "model.d_model=64",
            "model.d_ff=128",
            "trainer.effective_tokens=1024",
            "trainer.eval_every=10",
            "trainer.eval_bleu_sentences=0",
            "trainer.save_every_steps=10",
            "optim.warmup=10",
            "trainer.num_threads=1",
        ],  # fmt: skip
        "variants": {variant: {} for variant in variants},
        "conditions": {"all": {}},
        "grid": {"rates": [1.0], "steps": 40, "seeds": [1, 2], "edge_steps": 0},
        "check": {"within": 2.0, "seeds": [1, 2]},
        "final": {"steps": 50, "seeds": 2, "average_last": 2},
        "statistics": {"baselines": ["sinusoidal"]},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study), encoding="utf-8")
    return path


def tree_hash(*folders: Path) -> str:
    """sha256 over every file's relative path and bytes under folders."""
    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(folder)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def weights(run: Path) -> dict:
    """The model weights of a run's last checkpoint."""
    return load_checkpoint(run / "checkpoints" / "last.pt")["model"]


def test_one_command_resumes_after_a_kill_and_then_changes_nothing(tmp_path):
    path = tiny_study(tmp_path)
    study = load_study(str(path))
    work, results = tmp_path / "work", tmp_path / "results"
    args = [str(path), "--launcher", "submitit_local", "--work", str(work)]
    args += ["--results", str(results), "--", f"cache_dir={tmp_path / 'cache'}"]
    first, second = (Point("grid", "all", "sinusoidal", 1.0, s, 40) for s in (1, 2))
    command = [sys.executable, str(ROOT / "scripts" / "run_study.py"), *args]
    driver = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    midway = work_dir(work, study, second) / "checkpoints" / "step_10.pt"
    try:
        while not midway.exists():
            assert driver.poll() is None, "the study ended before its second run was mid-way"
            time.sleep(0.05)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and every run it started
        driver.wait()
    assert read_record(record_dir(results, study, first)) is not None
    assert read_record(record_dir(results, study, second)) is None
    assert not (work_dir(work, study, second) / "metrics.json").exists()

    assert script_main("run_study")(args) == 0
    resumed = work_dir(work, study, second)
    assert "resum" in (resumed / "train.log").read_text().lower()
    fresh = tmp_path / "uninterrupted"
    words = [*second.train_overrides(study, (f"cache_dir={tmp_path / 'cache'}",))]
    subprocess.run([sys.executable, "train.py", *words, f"hydra.run.dir={fresh}"], cwd=ROOT,
                   check=True, capture_output=True)  # fmt: skip
    for key, value in weights(fresh).items():
        assert torch.equal(value, weights(resumed)[key]), key
    finals = [Point("final", "all", "sinusoidal", 1.0, s, 50) for s in (1, 2)]
    assert all(read_record(record_dir(results, study, p)) for p in finals)
    scores = read_scores(record_dir(results, study, finals[0]))
    last, averaged = scores.score("test", "last"), scores.score("test", "avg:2")
    assert last.step == averaged.step == 50 and last.n_sentences == 61
    assert last.weights_sha256 != averaged.weights_sha256
    readme = (results / "tiny" / SUMMARY / "README.md").read_text()
    assert "## The answer" in readme and "BLEU avg:2" in readme
    assert f"Declared in `{path.resolve()}`" in readme  # the file read (probe l-24)
    assert (results / "tiny" / SUMMARY / f"grid_{RATE_FIGURE}").is_file()  # and drawn in the style

    before = tree_hash(work, results)
    assert script_main("run_study")(args) == 0
    assert tree_hash(work, results) == before


def test_a_run_that_fails_is_named_and_the_command_exits_1(tmp_path, capsys):
    """A point train.py refuses is not recorded: its log is named and the exit status is 1.
    (A setting out of range is refused before anything trains; cleaning every pair away, with
    data.max_len=2, is found only when a run reads its data.)"""
    path = tiny_study(tmp_path)
    args = [str(path), "--work", str(tmp_path / "work"), "--results", str(tmp_path / "results")]
    args += ["--", f"cache_dir={tmp_path / 'cache'}", "data.max_len=2"]
    assert script_main("run_study")(args) == 1
    out = capsys.readouterr().out
    assert "2 runs failed" in out and "grid_all_sinusoidal_lr1_steps40_seed-1.log" in out
    assert not list((tmp_path / "results").glob("tiny/grid/runs/**/record.json"))


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory) -> tuple[Path, list[str]]:
    """The tiny study trained and scored once: its folder, and the report's arguments."""
    folder = tmp_path_factory.mktemp("tiny_store")
    path = tiny_study(folder, variants=("sinusoidal", "learned"))
    args = [str(path), "--work", str(folder / "work"), "--results", str(folder / "results")]
    args += ["--", f"cache_dir={folder / 'cache'}"]
    assert script_main("run_study")(args) == 0
    return folder, [str(path), "--report", "--work", str(folder / "work")]


FINAL = Path("tiny/final/runs/all/sinusoidal/seed-1")
LAST = FINAL / "eval" / "test-last-beam4"


def edit_json(path: Path, change) -> None:
    """Rewrite a JSON file with change(data) applied."""
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def last_bleu(data: dict, value: float) -> None:
    """scores.json's test BLEU at the last checkpoint set to value."""
    next(s for s in data["scores"] if s["checkpoint"] == "last")["bleu"] = value


def edit_hyp(path: Path, lines) -> None:
    """Rewrite a .hyp with lines(its lines)."""
    kept = path.read_text(encoding="utf-8").splitlines()
    path.write_text("".join(f"{line}\n" for line in lines(kept)), encoding="utf-8")


def both_bleu(store: Path) -> None:
    """BLEU 35.0 in the evaluation JSON and in scores.json alike, the .hyp unchanged."""
    edit_json(store / f"{LAST}.json", lambda d: d.update(bleu=35.0))
    edit_json(store / FINAL / "scores.json", lambda d: last_bleu(d, 35.0))


def linked_outside(store: Path, inside: Path) -> None:
    """inside (a file or folder of the store) moved out of it, a link left in its place."""
    outside = store.parent / "outside" / inside.name
    outside.parent.mkdir()
    shutil.move(store / inside, outside)
    (store / inside).symlink_to(outside, target_is_directory=outside.is_dir())


TAMPERED = {  # what is changed in a copy of the store, and the file the error names
    "hyp deleted": (lambda s: (s / f"{LAST}.hyp").unlink(), f"{LAST}.hyp"),
    "hyp truncated": (lambda s: edit_hyp(s / f"{LAST}.hyp", lambda h: h[: len(h) // 2]),
                      f"{LAST}.hyp"),
    "hyp line edited": (lambda s: edit_hyp(s / f"{LAST}.hyp", lambda h: ["edited", *h[1:]]),
                        f"{LAST}.hyp"),
    "scores BLEU": (lambda s: edit_json(s / FINAL / "scores.json", lambda d: last_bleu(d, 35.0)),
                    f"{FINAL}/scores.json"),
    "record dev PPL": (lambda s: edit_json(s / FINAL / "record.json",
                                           lambda d: d.update(dev_ppl=5.0)),
                       f"{FINAL}/record.json"),
    "eval and scores BLEU": (both_bleu, f"{LAST}.json"),
    "record rate": (lambda s: edit_json(s / FINAL / "record.json",
                                        lambda d: d.update(lr_scale=0.5)),
                    f"{FINAL}/record.json"),
    "hyp linked": (lambda s: linked_outside(s, LAST.with_suffix(".hyp")), f"{LAST}.hyp"),
    "folder linked": (lambda s: linked_outside(s, FINAL), str(FINAL)),
    "record variant": (lambda s: edit_json(s / FINAL / "record.json",
                                           lambda d: d.update(variant="rope")),
                       f"{FINAL}/record.json"),
}  # fmt: skip


@pytest.mark.parametrize("case", TAMPERED, ids=list(TAMPERED))
def test_a_tampered_record_is_one_error_and_no_report(tiny_store, tmp_path, capsys, case):
    """A record edited after scoring is one `error:` line naming the file, and no report."""
    folder, report = tiny_store
    store = tmp_path / "results"
    shutil.copytree(folder / "results", store)
    shutil.rmtree(store / "tiny" / SUMMARY)
    tamper, named = TAMPERED[case]
    tamper(store)
    with pytest.raises(SystemExit) as exited:
        script_main("run_study")([*report, "--results", str(store), "--", *report_data(folder)])
    assert exited.value.code == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(store / named) in errors[0], errors
    assert not (store / "tiny" / SUMMARY).exists()


def test_a_report_killed_mid_write_leaves_the_summary_before(tiny_store, tmp_path, monkeypatch):
    """The outside probe's 14-11: killed after README.md was rewritten, the summary folder was
    half new (README, runs.json) and half old (figures); now it is swapped in whole or not."""
    folder, report = tiny_store
    store = tmp_path / "results"
    shutil.copytree(folder / "results", store)
    summary = store / "tiny" / SUMMARY
    (summary / "README.md").write_text("the summary before\n", encoding="utf-8")
    before = tree_hash(store)

    def killed(*_args, **_kwargs):
        raise KeyboardInterrupt  # once the README and runs.json are written, before a figure

    monkeypatch.setattr("studies.stages.plot_rate_curves", killed)
    with pytest.raises(KeyboardInterrupt):
        script_main("run_study")([*report, "--results", str(store), "--", *report_data(folder)])
    assert tree_hash(store) == before
    assert sorted(p.name for p in (store / "tiny").iterdir()) == sorted(
        p.name for p in (folder / "results" / "tiny").iterdir()
    )  # no staging folder left beside it


def test_a_record_at_another_precision_is_not_this_studys_run(tiny_store, capsys):
    """The probe's d-23: `-- trainer.precision=bf16` took the fp32 records as its runs."""
    folder, report = tiny_store
    args = [*report, "--results", str(folder / "results"), "--", *report_data(folder)]
    before = tree_hash(folder / "results")
    with pytest.raises(SystemExit) as exited:
        script_main("run_study")([*args, "trainer.precision=bf16"])
    assert exited.value.code == 1
    assert "precision: fp32 -> bf16" in capsys.readouterr().err
    assert tree_hash(folder / "results") == before


def test_a_budget_declared_anew_after_its_records_is_refused(tiny_store, tmp_path, capsys):
    """Probe 17-5: the final budget edited from 20 to 40 steps after the finals were kept: the
    report called the 20-step records 40-step finals."""
    folder, report = tiny_store
    study = yaml.safe_load(Path(report[0]).read_text(encoding="utf-8"))
    study["final"]["steps"] = 60
    edited = tmp_path / "tiny.yaml"
    edited.write_text(yaml.safe_dump(study), encoding="utf-8")
    args = [str(edited), *report[1:], "--results", str(folder / "results")]
    before = tree_hash(folder / "results")
    with pytest.raises(SystemExit) as exited:
        script_main("run_study")([*args, "--", *report_data(folder)])
    assert exited.value.code == 1 and tree_hash(folder / "results") == before
    err = capsys.readouterr().err.strip().splitlines()
    assert "holds a 50-step training, but the study declares 60 steps" in err[-1], err


def test_a_report_reads_the_store_alone(tiny_store, tmp_path, capsys):
    """Probe 17-22: a store missing learned's grid records reported learned's grid as decided,
    from the runs its work folder still held (outside the store)."""
    folder, report = tiny_store
    results = tmp_path / "results"
    shutil.copytree(folder / "results", results)
    shutil.rmtree(results / "tiny" / "grid" / "runs" / "all" / "learned")
    args = [*report, "--results", str(results), "--", *report_data(folder)]
    assert script_main("run_study")(args) == 0
    out = capsys.readouterr().out
    assert "grid all/learned ×1 seed 1 (40 steps) trained in" in out and "not kept" in out
    summary = (results / "tiny" / SUMMARY / "README.md").read_text(encoding="utf-8")
    assert "- all/learned: not decided" in summary, summary


def test_a_dry_run_keeps_no_record_of_a_finished_run(tiny_store, tmp_path, capsys):
    """A dry run beside a work folder holding a finished run not yet recorded wrote its
    record into the store (a final made from a check run): a dry run writes nothing."""
    folder, report = tiny_store
    results = tmp_path / "results"
    shutil.copytree(folder / "results", results)
    shutil.rmtree(results / FINAL)
    before = tree_hash(results)
    args = [report[0], "--dry-run", *report[2:], "--results", str(results)]
    assert script_main("run_study")([*args, "--", *report_data(folder)]) == 0
    assert tree_hash(results) == before
    out = capsys.readouterr().out
    assert "a run without --dry-run keeps it" in out and "to train now: final" not in out


def report_data(folder: Path) -> list[str]:
    """The report's overrides of every run (the tiny study's cache)."""
    return [f"cache_dir={folder / 'cache'}"]


def final_bleu(results: Path, study, variant: str, seed: int) -> float:
    """A final's test BLEU at the last checkpoint, as its scores.json records it."""
    point = Point("final", "all", variant, 1.0, seed, 50)
    return read_scores(record_dir(results, study, point)).score("test", "last").bleu


def test_across_studies_refuses_studies_holding_one_training(tiny_store, tmp_path, capsys):
    """The probe's l-21: a second study recording the first's trainings (copied run folders)
    was pooled with it, each run counted twice and the interval falsely narrow."""
    folder, _ = tiny_store
    results, work = tmp_path / "results", tmp_path / "work"
    shutil.copytree(folder / "results", results)
    shutil.copytree(folder / "work" / "tiny", work / "tiny_b")
    second = tiny_study(tmp_path, "tiny_b", ("sinusoidal", "learned"))
    words = ["--work", str(work), "--results", str(results), "--", *report_data(folder)]
    assert script_main("run_study")([str(second), *words]) == 0  # recorded, not trained
    with pytest.raises(SystemExit) as exited:
        script_main("across_studies")([str(folder / "tiny.yaml"), str(second), "--results",
                                       str(results)])  # fmt: skip
    assert exited.value.code == 1
    assert "is a training of both tiny and tiny_b" in capsys.readouterr().err
    assert not (results / "tiny+tiny_b").exists()


@pytest.mark.slow  # trains a second tiny study (8 runs)
def test_across_studies_sets_two_studies_side_by_side(tiny_store, tmp_path, monkeypatch):
    """A second study on a smaller corpus: each study's difference, named by the study, is
    the mean paired difference of the BLEUs its scores.json hold; the report is swapped in
    whole. (At 50 steps these tiny models score BLEU 0, so the differences are 0: no sign, no
    pool; the pool's arithmetic is tests/unit/studies/test_across.py's.)"""
    folder, _ = tiny_store
    results, work = tmp_path / "results", tmp_path / "work"
    shutil.copytree(folder / "results", results)
    first = folder / "tiny.yaml"
    second = tiny_study(tmp_path, "tiny_b", ("sinusoidal", "learned"), train_size=2900)
    words = ["--work", str(work), "--results", str(results), "--", *report_data(folder)]
    assert script_main("run_study")([str(second), *words]) == 0
    monkeypatch.chdir(tmp_path)
    args = [str(first), str(second), "--results", str(results)]
    assert script_main("across_studies")(args) == 0
    out = results / "tiny+tiny_b"  # named by the studies, not by the paths given
    (row,) = json.loads((out / "across.json").read_text(encoding="utf-8"))
    assert (row["baseline"], row["variant"], row["steps"]) == ("sinusoidal", "learned", 50)
    assert sorted(row["by_study"]) == ["tiny", "tiny_b"]
    for name, path in (("tiny", first), ("tiny_b", second)):
        study = load_study(str(path))
        by_hand = statistics.mean(
            final_bleu(results, study, "learned", s) - final_bleu(results, study, "sinusoidal", s)
            for s in (1, 2)
        )
        assert row["by_study"][name]["difference"] == pytest.approx(by_hand)
    (out / "README.md").write_text("the report before\n", encoding="utf-8")
    before = tree_hash(out)

    def killed(*_args, **_kwargs):
        raise KeyboardInterrupt  # README.md written, across.json not yet

    main = script_main("across_studies")
    monkeypatch.setitem(inspect.unwrap(main).__globals__, "write_json", killed)
    with pytest.raises(KeyboardInterrupt):
        main(args)
    assert tree_hash(out) == before and not list(results.glob(".tiny+tiny_b*"))

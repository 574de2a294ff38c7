"""The German study's old records into its declared store: points read from the runs' own files,
the folder names checked against them, and no absolute path in what is copied."""

import hashlib
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from common.configs import compose_config
from studies.finals import is_scored, read_scores
from studies.migration import ABSOLUTE, migrate
from studies.protocol import load_study
from studies.store import Point, read_record, record_dir

STUDY = load_study("pe_multi30k")
# two old stores: a grid store at x1 and a final store at 8,000 steps
STORES = (("old_lr1", {"lr_scale": 1.0, "steps": 2000}), ("old_final", {"steps": 8000}))


def old_run(folder: Path, seed: int, steps: int, data: Path, scored: bool = False) -> None:
    """A finished run as the old stores keep it, trained in /work/outputs/... on data/."""
    trained = f"/work/outputs/old/all/rope/seed-{seed}"
    config = compose_config(
        ["experiment=pe_study_multi30k", "position=rope", f"seed={seed}", "optim.lr_scale=1.0",
         f"trainer.max_steps={steps}", f"data.path={data}", f"run_dir={trained}"]
    )  # fmt: skip
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(config))
    metrics = {"complete": True, "steps": steps, "dev_ppl": 6.0 + seed, "wall_seconds": 100.0,
               "position_choice": "rope", "seed": seed}  # fmt: skip
    (folder / "metrics.json").write_text(json.dumps(metrics))
    segment = {"code": None, "cwd": "/work/wt-study", "overrides": [f"data.path={data}"]}
    (folder / "segments.json").write_text(json.dumps({"segments": [segment]}))
    summary = {"splits": {"train": 29000}, "tokenizer": {"path": f"{trained}/tokenizer/spm.model"}}
    (folder / "data.json").write_text(json.dumps(summary))
    (folder / "train.log").write_text(
        f"run directory: {trained}\ntokenizer /work/wt-study/.cache/t/spm.model\n"
        f"data {data}/train.en\n"
    )
    if scored:
        scores = {"condition": "all", "variant": "rope", "seed": seed, "step": steps,
                  "run_dir": trained}  # fmt: skip
        (folder / "study.json").write_text(json.dumps(scores))
        (folder / "eval").mkdir()
        scores = {"split": "test", "step": steps, "beam": 4, "lenpen": 0.6, "bleu": 30.0,
                  "chrf": 55.0, "tok_bleu": 30.1, "n_sentences": 1, "signature": "s",
                  "checkpoint_sha256": "c0", "checkpoint_file": f"{trained}/checkpoints/last.pt",
                  "hypotheses": f"{trained}/eval/test-last-beam4.hyp",
                  "data": {"path": str(data)}}  # fmt: skip
        (folder / "eval" / "test-last-beam4.json").write_text(json.dumps(scores))
        (folder / "eval" / "test-last-beam4.hyp").write_text("ein Hund\n")


@pytest.fixture(name="results")
def fake_results(tmp_path) -> Path:
    """results/ holding old_lr1 (seeds 1 and 3, the latter in a folder named seed-2) and
    old_final (seed 1 at 8,000 steps, scored)."""
    results, data = tmp_path / "results", tmp_path / "data"
    data.mkdir()
    old_run(results / "old_lr1" / "runs" / "all" / "rope" / "seed-1", 1, 2000, data)
    old_run(results / "old_lr1" / "runs" / "all" / "rope" / "seed-2", 3, 2000, data)
    old_run(results / "old_final" / "runs" / "all" / "rope" / "seed-1", 1, 8000, data, True)
    return results


def tree(folder: Path) -> dict[str, str]:
    """{file: sha256} under folder."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_points_come_from_the_runs_own_files(results):
    summary = migrate(results, STUDY, STORES, final_store="old_final")
    grid, check, final = (
        Point("grid", "all", "rope", 1.0, 1, 2000),
        Point("check", "all", "rope", 1.0, 1, 8000),
        Point("final", "all", "rope", 1.0, 1, 8000),
    )
    assert set(summary.kept) == {grid, Point("grid", "all", "rope", 1.0, 3, 2000), check, final}
    assert summary.kept[grid].folder.parts[-5:] == ("old_lr1", "runs", "all", "rope", "seed-1")
    record = read_record(record_dir(results, STUDY, final))
    assert (record.stage, record.seed, record.dev_ppl, record.cpu_seconds) == ("final", 1, 7.0, 100)
    assert record.code_version == "unrecorded" and record.fingerprints == {}
    assert "'data.path=<folder>'" in record.command and str(results) not in record.command
    assert len(summary.no_fingerprints) == 4 and not summary.refused
    # what the old report reads is kept with the finals only, and their scores as run_study's
    assert (record_dir(results, STUDY, final) / "eval" / "test-last-beam4.hyp").is_file()
    assert not (record_dir(results, STUDY, check) / "study.json").exists()
    assert is_scored(STUDY, record_dir(results, STUDY, final)) and not summary.unscored
    assert read_scores(record_dir(results, STUDY, final)).score("test", "last").bleu == 30.0


def test_a_folder_name_that_disagrees_with_the_config_is_reported(results):
    summary = migrate(results, STUDY, STORES, final_store="old_final")
    assert summary.disagreements == [
        f"{results}/old_lr1/runs/all/rope/seed-2: folder name: seed 2, config 3"
    ]


def test_no_copied_file_names_an_absolute_path(results):
    summary = migrate(results, STUDY, STORES, final_store="old_final")
    assert summary.absolute_paths == []
    store = results / STUDY.name
    for path in store.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            assert "/work/" not in text and str(results.parent) not in text, path
            assert not ABSOLUTE.findall(text), path
    log = record_dir(results, STUDY, Point("final", "all", "rope", 1.0, 1, 8000)) / "train.log"
    assert log.read_text() == (
        "run directory: <run_dir>\ntokenizer <checkout>/.cache/t/spm.model\n"
        "data <data.path>/train.en\n"
    )


def test_a_second_migration_gives_the_same_tree(results):
    migrate(results, STUDY, STORES, final_store="old_final")
    first = tree(results / STUDY.name)
    migrate(results, STUDY, STORES, final_store="old_final")
    assert tree(results / STUDY.name) == first

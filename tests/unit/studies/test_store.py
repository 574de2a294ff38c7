"""A declared study's folders and records: one folder per training, no path outside the store."""

import json
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from common.configs import compose_config
from studies.protocol import load_study
from studies.store import (
    Point,
    command_line,
    keep,
    make_record,
    read_record,
    record_differences,
    record_dir,
    work_dir,
)

STUDY = load_study("pe_multi30k_fr")


def test_a_check_run_at_the_chosen_rate_is_the_final_of_its_seed():
    check = Point("check", "all", "rope", 0.5, 1, 8000)
    final = Point("final", "all", "rope", 0.5, 1, 8000)
    grid = Point("grid", "all", "rope", 0.5, 1, 2000)
    assert work_dir(Path("w"), STUDY, check) == work_dir(Path("w"), STUDY, final)
    assert work_dir(Path("w"), STUDY, grid) != work_dir(Path("w"), STUDY, final)
    assert record_dir(Path("r"), STUDY, check) == Path(
        "r/pe_multi30k_fr/check/runs/all/rope/lr0.5/seed-1"
    )
    assert record_dir(Path("r"), STUDY, final) == Path(
        "r/pe_multi30k_fr/final/runs/all/rope/seed-1"
    )


def test_settings_get_a_folder_of_their_own():
    point = Point("grid", "all", "rope", 1.0, 2, 2000, ("position.max_shift=10",))
    assert "rope/max_shift10/lr1/steps2000/seed-2" in str(work_dir(Path("w"), STUDY, point))


def test_the_training_command_leaves_paths_for_the_reader():
    line = command_line(["position=rope", "data.path=/home/me/fr", "run_dir=/tmp/x", "seed=1"])
    assert line == "python train.py position=rope 'data.path=<folder>' 'run_dir=<folder>' seed=1"


def fake_run(run: Path, data: Path, cache: Path) -> None:
    """A finished run folder as train.py leaves it, naming its folders by absolute path."""
    (run / ".hydra").mkdir(parents=True)
    config = {"run_dir": str(run), "cache_dir": str(cache), "seed": 1,
              "trainer": {"num_threads": 1}, "data": {"path": str(data),
              "corpus": {"path": str(data)}}}  # fmt: skip
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    segment = {"code": "abc123", "cwd": "/somewhere/checkout", "run_dir": str(run)}
    (run / "segments.json").write_text(
        json.dumps({"segments": [segment, {**segment, "code": "d"}]})
    )
    summary = {"tokenizer": {"path": f"{cache}/tok/spm.model"}, "fingerprints": {"text": {}}}
    (run / "data.json").write_text(json.dumps(summary))
    (run / "metrics.json").write_text(
        json.dumps({"complete": True, "dev_ppl": 6.5, "wall_seconds": 60})
    )
    (run / "train.log").write_text(
        f"run directory: {run}\ncache {cache}/tok\ndata {data}/train.en\n"
    )


def test_a_kept_record_names_no_folder_outside_the_store(tmp_path):
    run, data, cache = tmp_path / "work" / "run", tmp_path / "fr", tmp_path / "cache"
    data.mkdir(), cache.mkdir()
    fake_run(run, data, cache)
    point = Point("grid", "all", "rope", 0.5, 1, 2000)
    words = point.train_overrides(STUDY, (f"data.path={data}",))
    record = make_record(run, STUDY, point, words, json.loads((run / "metrics.json").read_text()))
    folder = record_dir(tmp_path / "results", STUDY, point)
    keep(run, folder, record)
    kept = read_record(folder)
    assert kept == record and kept.dev_ppl == 6.5 and kept.cpu_seconds == 60.0
    assert kept.code_version == "abc123, then d"  # what it trained at, not what recorded it
    for path in folder.rglob("*"):
        if path.is_file():
            text = path.read_text()
            for outside in (str(tmp_path), "/somewhere/checkout"):
                assert outside not in text, f"{path.name} names {outside}"
    assert "<run_dir>" in (folder / "train.log").read_text()
    assert "<data.path>" in (folder / "train.log").read_text()


def record_folder(folder: Path, config: dict, texts: dict) -> Path:
    """A kept record holding a resolved config and data.json's text fingerprints."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "data.json").write_text(json.dumps({"fingerprints": {"text": texts}}))
    return folder


def test_a_record_trained_otherwise_is_refused_by_settings_and_data_not_paths(tmp_path):
    point = Point("grid", "all", "rope", 0.5, 1, 2000)
    words = [*point.train_overrides(STUDY), "run_dir=/somewhere"]
    wanted = OmegaConf.to_container(compose_config(words), resolve=True)
    texts = {"train": {"pairs": 3, "sha256": "a" * 64}, "test": {"pairs": 1, "sha256": "b" * 64}}
    moved = json.loads(json.dumps(wanted)) | {"run_dir": "/elsewhere", "cache_dir": "/c"}
    moved["data"]["path"] = "/another/copy"
    assert record_differences(record_folder(tmp_path / "same", moved, texts), wanted, texts) == []
    other = json.loads(json.dumps(wanted))
    other["optim"]["lr_scale"] = 1.0
    refused = record_differences(record_folder(tmp_path / "rate", other, texts), wanted, texts)
    assert refused == ["optim.lr_scale: 1.0 -> 0.5"]
    edited = {**texts, "test": {"pairs": 1, "sha256": "c" * 64}}
    refused = record_differences(record_folder(tmp_path / "data", wanted, edited), wanted, texts)
    assert refused == [f"test text: {'c' * 12} -> {'b' * 12}"]

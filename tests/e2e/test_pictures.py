"""`scripts/study.py pictures` on a real trained run: the files, their shapes, the refusals."""

import json
import shutil

import pytest
from omegaconf import OmegaConf

from runs.load import load_run
from tests.conftest import script_main


def test_pictures_of_a_trained_run(trained_run, tmp_path):
    out = tmp_path / "pictures"
    script_main("study")(["pictures", "--runs", str(trained_run), "--out", str(out)])
    written = sorted(p.name for p in out.iterdir())
    assert written == [
        "attention_distance.png",
        "pictures.json",
        "pictures.md",
        "position_similarity.png",
    ]
    config = OmegaConf.create(load_run(trained_run, "last")[0]["config"])
    (run,) = json.loads((out / "pictures.json").read_text())["runs"]
    assert run["variant"] == "sinusoidal" and run["step"] == 240 and run["split"] == "test"
    assert run["sentences"] > 0 and run["skipped"] == 0
    assert len(run["similarity"]) == 64 and run["similarity"][5][5] == pytest.approx(1.0)
    for side in ("encoder", "decoder"):
        table = run[f"{side}_distance"]
        assert len(table) == config.model[f"n_{side}_layers"]
        assert {len(row) for row in table} == {config.model.n_heads}
        # a head looks at least as near as position 0 and no farther than the farthest key
        assert all(0 < d < 2 * run[f"{side}_uniform"] for row in table for d in row)
    markdown = (out / "pictures.md").read_text()
    assert markdown.count("| sinusoidal |") == sum(
        config.model[f"n_{side}_layers"] for side in ("encoder", "decoder")
    )


def test_a_folder_without_weights_is_refused_in_one_line(trained_run, tmp_path, capsys):
    record = tmp_path / "record"  # what a record store keeps: no checkpoints
    shutil.copytree(trained_run, record, ignore=shutil.ignore_patterns("checkpoints"))
    out = tmp_path / "pictures"
    with pytest.raises(SystemExit) as exit_info:
        script_main("study")(["pictures", "--runs", str(record), "--out", str(out)])
    assert exit_info.value.code == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [
        f"error: --runs {record}: no checkpoints/last.pt; pass a training run "
        "folder (a record store keeps no weights)"
    ]
    assert not out.exists()


def test_fewer_than_two_positions_is_refused(trained_run, tmp_path, capsys):
    with pytest.raises(SystemExit):
        script_main("study")(["pictures", "--runs", str(trained_run), "--positions", "1"])
    assert "--positions 1: pass 2 or more positions" in capsys.readouterr().err

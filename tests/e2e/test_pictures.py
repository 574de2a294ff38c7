"""`scripts/study.py pictures` on a real trained run: the files, their shapes, the refusals."""

import json
import shutil

import pytest
from omegaconf import OmegaConf

from common.configs import compose_config
from runs.run import load_run
from tests.conftest import script_main, tiny_run_overrides


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
        script_main("study")(
            ["pictures", "--runs", str(trained_run), "--positions", "1", "--out", str(tmp_path)]
        )
    assert "--positions 1: pass 2 or more positions" in capsys.readouterr().err


def test_keep_adds_a_variant_measured_later_and_replaces_its_own(
    trained_run, cache_dir, tmp_path, capsys
):
    """Pictures made over several calls (run folders that do not live at once): --keep holds
    the other variants' runs, a variant measured again replaces its own, the variants stand in
    their figures' order whatever the order measured, and other measuring settings are refused
    before anything is written."""
    from training.launch import train

    learned = tmp_path / "learned"
    train(
        compose_config(
            tiny_run_overrides(learned, cache_dir, "position=learned", "trainer.max_steps=20")
        )
    )
    out, main = tmp_path / "pictures", script_main("study")
    main(["pictures", "--runs", str(learned), "--out", str(out)])
    first = json.loads((out / "pictures.json").read_text())["runs"]
    for _ in range(2):  # the second call replaces sinusoidal's run, it does not add it again
        main(["pictures", "--runs", str(trained_run), "--out", str(out), "--keep"])
    runs = json.loads((out / "pictures.json").read_text())["runs"]
    assert [r["variant"] for r in runs] == ["sinusoidal", "learned"] and runs[1] == first[0]
    assert f"kept from {out / 'pictures.json'}: {learned}" in capsys.readouterr().out
    markdown = (out / "pictures.md").read_text()
    assert "| learned |" in markdown and "| sinusoidal |" in markdown
    before = (out / "pictures.json").read_bytes()
    with pytest.raises(SystemExit):
        main(["pictures", "--runs", str(learned), "--out", str(out), "--keep", "--positions", "32"])
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "over 64 positions; pass --split test --positions 64" in error[0]
    assert (out / "pictures.json").read_bytes() == before
    main(["pictures", "--runs", str(learned), "--out", str(out)])  # without --keep: these runs
    assert [r["variant"] for r in json.loads((out / "pictures.json").read_text())["runs"]] == [
        "learned"
    ]

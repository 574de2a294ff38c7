"""SHAPE's K chosen on dev (studies/choice.py, scripts/study.py choose) from tune's tuning.json
files over copies of the committed SHAPE records, one store per K."""

import json
import re
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from studies.choice import choose_setting
from studies.tuning import Protocol, TuningError, tune
from tests.conftest import ROOT, script_main

RECORDS = (
    ROOT / "results" / "archive" / "pe_study" / "runs" / "all" / "sinusoidal_shape"
)  # K 100, x1
KEY = "position.max_shift"


def shape_grid(store: Path, k: int, ppls: dict[int, float], out: Path) -> Path:
    """Records of seeds (ppls: seed -> dev PPL) trained, so their configs say, at K = k, and
    the tuning.json `tune ... -- position.max_shift=k` writes of them."""
    for seed, ppl in ppls.items():
        target = store / "all" / "sinusoidal_shape" / f"seed-{seed}"
        shutil.copytree(RECORDS / f"seed-{seed}", target)
        config = OmegaConf.load(target / ".hydra" / "config.yaml")
        config.position.max_shift = k
        OmegaConf.save(config, target / ".hydra" / "config.yaml")
        metrics = json.loads((target / "metrics.json").read_text())
        (target / "metrics.json").write_text(json.dumps(metrics | {"dev_ppl": ppl}))
    protocol = Protocol(variants=("sinusoidal_shape",), rates=(1.0,), overrides=(f"{KEY}={k}",))
    tune([store], protocol, out, echo=lambda _: None)
    return out / "tuning.json"


def test_the_value_of_the_lowest_mean_dev_ppl_is_chosen(tmp_path, capsys):
    grids = {10: {1: 9.0, 2: 9.6}, 25: {1: 9.4, 2: 9.0}, 100: {1: 9.1, 2: 9.8}}
    files = [shape_grid(tmp_path / f"s{k}", k, p, tmp_path / f"t{k}") for k, p in grids.items()]
    main = script_main("study")
    argv = ["choose", "--setting", KEY, "--rate", "1.0", "--out", str(tmp_path / "k")]
    main(argv + ["--tunings", *map(str, files)])
    result = json.loads((tmp_path / "k" / "choice.json").read_text())
    row = result["variants"]["sinusoidal_shape"]
    assert (row["chosen"], row["complete"]) == ("25", True)  # mean 9.2 against 9.3 and 9.45
    assert [p["mean"] for p in row["values"]] == pytest.approx([9.3, 9.2, 9.45])
    assert row["values"][1]["dev_ppl_by_seed"] == {"1": 9.4, "2": 9.0}
    markdown = (tmp_path / "k" / "choice.md").read_text()
    assert "| sinusoidal_shape | 25 | 1: 9.40, 2: 9.00 | 9.20 | 2 | **chosen** |" in markdown
    assert markdown.count("**chosen**") == 1 and "chosen" in capsys.readouterr().out


def test_a_value_missing_a_seed_chooses_nothing_final(tmp_path):
    files = [
        shape_grid(tmp_path / "s10", 10, {1: 9.0, 2: 9.6}, tmp_path / "t10"),
        shape_grid(tmp_path / "s25", 25, {1: 8.0}, tmp_path / "t25"),  # lowest, one seed
    ]
    result = choose_setting(KEY, 1.0, files, echo=lambda _: None)
    row = result.variants["sinusoidal_shape"]
    assert (row.chosen, row.complete) == ("10", False)


def test_files_that_are_not_one_grid_are_refused_in_one_line(tmp_path, capsys):
    t10 = shape_grid(tmp_path / "s10", 10, {1: 9.0, 2: 9.6}, tmp_path / "t10")
    t25 = shape_grid(tmp_path / "s25", 25, {1: 9.4, 2: 9.0}, tmp_path / "t25")
    bare = json.loads(t25.read_text()) | {"overrides": []}
    (tmp_path / "bare.json").write_text(json.dumps(bare))
    other = json.loads(t25.read_text()) | {"overrides": [f"{KEY}=25", "model.d_ff=96"]}
    (tmp_path / "other.json").write_text(json.dumps(other))
    budget = json.loads(t25.read_text()) | {"max_steps": [8000]}
    (tmp_path / "budget.json").write_text(json.dumps(budget))
    main = script_main("study")
    for files, message in (
        ([t10], "pass 2 or more tuning.json"),
        ([t10, tmp_path / "bare.json"], f"bare.json tuned no {KEY} "),
        ([t10, t10], f"both set {KEY}=10"),
        ([t10, tmp_path / "other.json"], r"other.json tuned another .*model.d_ff: 512 -> 96"),
        ([t10, tmp_path / "budget.json"], r"max_steps: \[2000\] -> \[8000\]"),
    ):
        out = tmp_path / "k"
        with pytest.raises(SystemExit) as exit_:
            main(["choose", "--setting", KEY, "--rate", "1", "--out", str(out), "--tunings"]
                 + [str(f) for f in files])  # fmt: skip
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_.value.code == 1 and len(err) == 1, err
        assert err[0].startswith("error: ") and re.search(message, err[0]), err
        assert not out.exists()
    with pytest.raises(TuningError, match="both set"):
        choose_setting(KEY, 1.0, [t25, t25], echo=lambda _: None)


def test_a_rate_no_grid_ran_is_refused_in_one_line_before_writing(tmp_path, capsys):
    t10 = shape_grid(tmp_path / "s10", 10, {1: 9.0, 2: 9.6}, tmp_path / "t10")
    t25 = shape_grid(tmp_path / "s25", 25, {1: 9.4, 2: 9.0}, tmp_path / "t25")
    out = tmp_path / "k7"
    with pytest.raises(SystemExit) as exit_:
        script_main("study")(
            ["choose", "--setting", KEY, "--rate", "7", "--out", str(out), "--tunings"]
            + [str(t10), str(t25)]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 1 and len(err) == 1, err
    assert err[0].startswith("error: --rate 7: ") and "the rates they ran: 1)" in err[0], err
    assert not out.exists()

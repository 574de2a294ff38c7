"""The German study's tuning.json files read back, and the plateau budget (studies/tuning.py,
scripts/study.py plateau), on the committed stores (read only) and copies of their files."""

import json
import math
import shutil
from pathlib import Path

import pytest

from studies.tuning import (
    PlateauRun,
    TuningError,
    math_differences,
    plateau,
    plateau_step,
    read_choices,
    read_curve,
    read_tuned_rates,
    step_budget,
)
from tests.conftest import ROOT

STORE = ROOT / "results" / "archive" / "pe_study" / "runs"  # optim.lr_scale 1.0
RECORD = STORE / "all" / "sinusoidal"
TUNING = ROOT / "results" / "archive"


def dev_ppl(record: Path) -> float:
    """What metrics.json holds: the dev PPL at the run's last step."""
    return json.loads((record / "metrics.json").read_text())["dev_ppl"]


def test_a_check_at_the_final_budget_overrides_the_grids_choice(tmp_path):
    """Row (E)'s check: the grid (2,000 steps) and its check at 8,000 steps merged, each variant
    takes the choice at the longest budget, whichever order the files come in; one budget
    twice, another configuration and a file `tune` did not write are refused in one line."""
    files = [TUNING / name / "tuning.json" for name in ("pe_tuning", "pe_tuning_final")]
    for order in (files, files[::-1]):
        tuned = read_tuned_rates(order)
        assert tuned.max_steps == (2000, 8000)
        assert tuned.choices["learned"].source == files[1]  # the check's
        assert tuned.choices["rope"].source == files[0]  # the grid's: not checked there
        assert tuned.overrides == ("trainer.max_steps=8000",)  # the longest budget's grid
    with pytest.raises(TuningError, match=r"both tuned sinusoidal at 2000 steps: pass one"):
        read_tuned_rates([files[0], files[0]])
    other = json.loads(files[1].read_text()) | {"overrides": ["model.d_ff=96"]}
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(TuningError, match=r"other.json tuned another .*model.d_ff: 512 -> 96"):
        read_tuned_rates([files[0], tmp_path / "other.json"])
    (tmp_path / "foreign.json").write_text(json.dumps({"variants": {}}))
    with pytest.raises(
        TuningError, match=r"foreign.json is not a tuning.json .*malformed: 'criterion'"
    ):
        read_tuned_rates(tmp_path / "foreign.json")
    with pytest.raises(TuningError, match=r"nowhere.json: no such file"):
        read_tuned_rates(tmp_path / "nowhere.json")


def test_plateau_on_a_constructed_curve():
    curve = [(250, 50.0), (500, 20.0), (750, 12.0), (1000, 11.9), (1250, 11.8), (1500, 11.75)]
    assert plateau_step(curve, 0.02) == 1000  # 11.75 >= 0.98 * 11.9, but < 0.98 * 12.0
    assert plateau_step(curve, 0.005) == 1250
    assert plateau_step(curve, 0.0001) is None  # still improving at the last-but-one eval
    assert plateau_step([(500, 10.0), (1000, 10.5)], 0.02) == 500  # worse later: flat
    runs = [
        PlateauRun(Path(f"r{i}"), "v", 1.0, 2000, 500, True, tuple(curve), step)
        for i, step in enumerate((1000, 1250))
    ]
    assert step_budget(runs)[0] == 1500  # the latest plateau, rounded up to the eval interval
    runs.append(PlateauRun(Path("open"), "v", 1.0, 2000, 500, True, tuple(curve), None))
    budget, why = step_budget(runs)
    assert budget is None and "open" in why


def test_plateau_on_a_committed_record(tmp_path):
    record = RECORD / "seed-1"
    curve = read_curve(record)
    logged = {
        int(line.split(" - step ")[1].split()[0]): float(line.split(" dev ppl ")[1].split()[0])
        for line in (record / "train.log").read_text().splitlines()
        if " dev ppl " in line
    }
    assert [step for step, _ in curve] == sorted(logged) == [500, 1000, 1500, 2000]
    assert all(abs(value - logged[step]) < 5e-4 for step, value in curve)
    assert curve[-1][1] == pytest.approx(dev_ppl(record))
    result = plateau([record], tmp_path / "two", 0.02, echo=lambda _: None)
    assert result["runs"][0]["plateau_step"] is None and result["budget"] is None
    gains = dict(result["runs"][0]["gain_after"])  # still 22% better after step 1500
    assert gains[1500] == pytest.approx(1 - curve[-1][1] / curve[-2][1])
    result = plateau([record], tmp_path / "thirty", 0.3, echo=lambda _: None)
    assert (result["runs"][0]["plateau_step"], result["budget"]) == (1500, 1500)
    assert (tmp_path / "thirty" / "dev_ppl_plateau.png").stat().st_size > 0
    no_events = tmp_path / "record"
    shutil.copytree(record, no_events, ignore=shutil.ignore_patterns("tensorboard"))
    from_log = read_curve(no_events)  # train.log's lines, three decimals
    assert [s for s, _ in from_log] == [s for s, _ in curve]
    assert all(
        math.isclose(a, b, abs_tol=5e-4) for (_, a), (_, b) in zip(from_log, curve, strict=True)
    )


def test_a_grid_at_its_own_position_settings_is_read_apart_by_the_report():
    """The study's committed tuning files as the report reads them: SHAPE's grid at its K (a
    position.* setting the other variants lack) beside the others', each variant's choice from
    its own grid, row (E)'s from the check at the final budget; one variant at two Ks refused."""
    files = [TUNING / f"{name}/tuning.json" for name in ("pe_tuning", "pe_tuning_final")]
    shape = TUNING / "pe_shape_tuning" / "tuning.json"
    choices = read_choices([*files, shape])
    assert choices["sinusoidal_shape"].source == shape
    assert choices["learned"].source == files[1] and choices["rope"].source == files[0]
    assert set(choices) == {*read_tuned_rates(files).choices, "sinusoidal_shape", "learned_shape"}
    with pytest.raises(
        TuningError,
        match=r"other position\.\* settings \(no position\.\* setting; position\.max_shift=10\): "
        r".*on its own",
    ):
        read_tuned_rates([*files, shape])  # one grid's choices merge with its own settings only
    with pytest.raises(TuningError, match=r"tuned sinusoidal_shape at other position.\* settings"):
        read_choices([shape, TUNING / "pe_shape_k100" / "tuning.json"])


def test_a_position_setting_is_compared_where_it_applies_and_named_where_it_does_not():
    """SHAPE's K against a grid without it: a difference at the SHAPE variant, and at a variant
    that has no K a named difference (not a traceback)."""
    shape = math_differences("pe_study_multi30k", [], ["position.max_shift=10"], ["learned_shape"])
    assert shape == ["position.max_shift: 100 -> 10"]
    (named,) = math_differences("pe_study_multi30k", [], ["position.max_shift=10"], ["sinusoidal"])
    assert named.startswith("position=sinusoidal: Could not override 'position.max_shift'")

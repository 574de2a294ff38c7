"""The tuning stage and the plateau budget (evaluation/tuning.py, scripts/study.py tune/plateau),
on the committed record stores (read only), on copies of a committed record, and on tiny runs."""

import json
import logging
import math
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from studies.grid import launch_grid, train_tuned
from studies.plan import StudyError
from studies.tuning import (
    GridRun,
    MissingRun,
    PlateauRun,
    Protocol,
    TuningError,
    budget_tag,
    in_checkout,
    math_differences,
    plateau,
    plateau_step,
    read_choices,
    read_curve,
    read_grid_run,
    read_tuned_rates,
    step_budget,
    study_store,
    tune,
)
from tests.conftest import ROOT, script_main
from training.step import DivergenceError

STORE = ROOT / "results" / "archive" / "pe_study" / "runs"  # optim.lr_scale 1.0
STORE_05 = ROOT / "results" / "archive" / "pe_study_lr05" / "runs"  # optim.lr_scale 0.5
RECORD = STORE / "all" / "sinusoidal"


def dev_ppl(record: Path) -> float:
    """What metrics.json holds: the dev PPL at the run's last step."""
    return json.loads((record / "metrics.json").read_text())["dev_ppl"]


def copy_record(
    seed: int, store: Path, rate: float, ppl: float | None = None, steps: int | None = None
) -> Path:
    """A committed record copied to <store>/all/sinusoidal/seed-<seed>, trained (so its config
    says) at optim.lr_scale=rate (and to trainer.max_steps=steps), its last dev PPL set to ppl
    (None: kept)."""
    target = store / "all" / "sinusoidal" / f"seed-{seed}"
    shutil.copytree(RECORD / f"seed-{seed}", target)
    config = OmegaConf.load(target / ".hydra" / "config.yaml")
    config.optim.lr_scale = rate
    config.trainer.max_steps = steps or config.trainer.max_steps
    OmegaConf.save(config, target / ".hydra" / "config.yaml")
    metrics = json.loads((target / "metrics.json").read_text())
    metrics |= {"dev_ppl": ppl or metrics["dev_ppl"], "steps": steps or metrics["steps"]}
    (target / "metrics.json").write_text(json.dumps(metrics))
    return target


def diverge(record: Path, caplog) -> None:
    """Leave in a record what a DivergenceError leaves: train.py's warnings in train.log, no
    metrics.json (train.py's own skipped_update writes the lines)."""
    from training.launch import skipped_update

    (record / "metrics.json").unlink()
    with caplog.at_level(logging.WARNING, logger="train"):
        with pytest.raises(DivergenceError):
            for bad in range(1, 11):
                skipped_update(bad, 1234, record / "checkpoints")
    with (record / "train.log").open("a") as log:
        log.writelines(
            f"[2026-12-03 00:00:00,000][train][WARNING] - {r.message}\n" for r in caplog.records
        )


def mean_ppl(*records: Path) -> float:
    return sum(dev_ppl(r) for r in records) / len(records)


def test_the_committed_stores_choose_the_lowest_mean_and_step_past_an_edge(tmp_path):
    protocol = Protocol(variants=("sinusoidal", "t5"), rates=(0.5, 1.0), seeds=(1, 2))
    result = tune([STORE, STORE_05], protocol, tmp_path / "out", echo=lambda _: None)
    edges = set()
    for variant in ("sinusoidal", "t5"):
        row = result.variants[variant]
        means = {
            rate: mean_ppl(*(store / "all" / variant / f"seed-{s}" for s in (1, 2)))
            for rate, store in ((0.5, STORE_05), (1.0, STORE))
        }
        best = min(means, key=means.get)
        assert row.chosen_lr_scale == best
        for point in row.rates:  # seeds 3-5 of the store are not the grid's
            assert point.n == 2 and point.mean == pytest.approx(means[point.lr_scale])
            store = STORE if point.lr_scale == 1.0 else STORE_05
            assert point.dev_ppl_by_seed == {
                str(s): dev_ppl(store / "all" / variant / f"seed-{s}") for s in (1, 2)
            }
        edge = "low" if best == 0.5 else "high"
        beyond = 0.25 if best == 0.5 else 2.0
        assert (row.at_edge, row.next_rate, row.complete) == (edge, beyond, False)
        edges.add(edge)
        command = next(c for c in result.commands if f"optim.lr_scale={beyond!r}" in c)
        assert f"--variants {variant}" in command and "--seeds 1 2" in command
        assert (
            f"--records results/archive/pe_study_lr{f'{beyond:g}'.replace('.', '')}/runs" in command
        )
        assert {(m.variant, m.lr_scale) for m in result.missing if m.variant == variant} == {
            (variant, beyond)
        }
    assert edges == {"low", "high"}  # these records exercise both edges
    saved = json.loads((tmp_path / "out" / "tuning.json").read_text())
    assert saved["variants"] == asdict(result)["variants"]
    assert (tmp_path / "out" / "dev_ppl_vs_lr.png").stat().st_size > 0
    assert "chosen so far" in (tmp_path / "out" / "tuning.md").read_text()  # edges to go


def test_a_full_grid_of_records_with_a_diverged_run(tmp_path, caplog):
    store = tmp_path / "store"
    ppls = {0.25: (15.0, 15.4), 0.5: (11.0, 11.5), 1.0: (10.9, 11.8), 2.0: (9.0, None)}
    for rate, (first, second) in ppls.items():
        copy_record(1, store / f"lr{rate}", rate, first)
        run = copy_record(2, store / f"lr{rate}", rate, second or 1.0)
        if second is None:  # seed 2 diverged at 2.0: counts as infinite, not as 1.0
            diverge(run, caplog)
    assert read_grid_run(run).diverged
    result = tune(
        sorted(store.iterdir()), Protocol(variants=("sinusoidal",)), tmp_path / "out", print
    )
    row = result.variants["sinusoidal"]
    assert len(row.rates) == 4
    means = {p.lr_scale: p.mean for p in row.rates}
    assert means[2.0] is None and row.rates[-1].diverged_seeds == [2]
    assert means[1.0] == pytest.approx(11.35) and means[0.5] == pytest.approx(11.25)
    assert row.chosen_lr_scale == 0.5  # the lowest mean, not the lowest seed (10.9, 9.0)
    assert (row.at_edge, row.complete, result.missing) == (None, True, [])
    markdown = (tmp_path / "out" / "tuning.md").read_text()
    assert "inf (diverged)" in markdown and "| sinusoidal | 0.5 |" in markdown
    assert markdown.count("**chosen**") == 1 and "chosen so far" not in markdown


def test_a_tuning_json_reads_back_typed_and_gives_only_a_final_rate(tmp_path):
    """What `run --tuning` reads: a full grid's interior choice; an edge, a variant the grid
    never tuned and a file tune did not write are refused in one line naming what to do."""
    store = tmp_path / "store"
    ppls = {0.25: (15.0, 15.4), 0.5: (11.0, 11.5), 1.0: (10.9, 11.8), 2.0: (12.0, 12.5)}
    for rate, (first, second) in ppls.items():
        copy_record(1, store / f"lr{rate}", rate, first)
        copy_record(2, store / f"lr{rate}", rate, second)
    full = Protocol(variants=("sinusoidal",), overrides=("trainer.eval_every=500",))
    tune(sorted(store.iterdir()), full, tmp_path / "full", echo=lambda _: None)
    tuned = read_tuned_rates(tmp_path / "full" / "tuning.json")
    assert (tuned.experiment, tuned.overrides) == ("pe_study_multi30k", ("trainer.eval_every=500",))
    assert tuned.final_rate("sinusoidal") == 0.5 and tuned.choices["sinusoidal"].missing == ()
    with pytest.raises(TuningError, match=r"tuned no rate for rope \(it tuned sinusoidal\)"):
        tuned.final_rate("rope")
    edge = Protocol(variants=("sinusoidal",), rates=(0.5, 1.0, 2.0))
    tune([store / "lr0.5", store / "lr1.0", store / "lr2.0"], edge, tmp_path / "edge", print)
    with pytest.raises(TuningError, match=r"not final \(×0.5 so far; .*×0.25 seed 1, ×0.25 seed"):
        read_tuned_rates(tmp_path / "edge" / "tuning.json").final_rate("sinusoidal")
    (tmp_path / "foreign.json").write_text(json.dumps({"variants": {}}))
    with pytest.raises(
        TuningError, match=r"foreign.json is not a tuning.json .*malformed: 'criterion'"
    ):
        read_tuned_rates(tmp_path / "foreign.json")
    with pytest.raises(TuningError, match=r"nowhere.json: no such file"):
        read_tuned_rates(tmp_path / "nowhere.json")


def full_grid(store: Path, ppls: dict, steps: int | None = None) -> list[Path]:
    """Records of every (rate, seed) in ppls {rate: (seed 1, seed 2)}, one store a rate."""
    for rate, by_seed in ppls.items():
        for seed, ppl in enumerate(by_seed, start=1):
            if ppl is not None:
                copy_record(seed, store / f"lr{rate}", rate, ppl, steps)
    return sorted(store.iterdir())


def test_a_check_at_the_final_budget_overrides_the_grids_choice(tmp_path):
    """Row (E)'s check: the grid chose x0.5 at 2,000 steps; at 8,000 steps x1 wins among the
    candidates and its neighbours. A rate outside the check's grid that only seed 1 ran (x0.25)
    is shown, not required; merged, each variant takes the choice at the longest budget."""
    grid = {0.25: (15.0, 15.4), 0.5: (11.0, 11.5), 1.0: (11.9, 11.8), 2.0: (12.0, 12.5)}
    tune(full_grid(tmp_path / "grid", grid), Protocol(), tmp_path / "t2000", echo=print)
    final = {0.25: (9.0, None), 0.5: (7.0, 7.2), 1.0: (6.7, 6.9), 2.0: (6.8, 7.3)}
    stores = full_grid(tmp_path / "final", final, steps=8000)
    check = Protocol(rates=(0.5, 1.0), overrides=("trainer.max_steps=8000",))
    result = tune(stores, check, tmp_path / "t8000", echo=print)
    row = result.variants["sinusoidal"]
    assert [p.lr_scale for p in row.rates] == [0.25, 0.5, 1.0, 2.0]
    assert (row.chosen_lr_scale, row.complete, result.missing) == (1.0, True, [])
    files = [tmp_path / "t2000" / "tuning.json", tmp_path / "t8000" / "tuning.json"]
    assert read_tuned_rates(files[0]).final_rate("sinusoidal") == 0.5
    for order in (files, files[::-1]):
        tuned = read_tuned_rates(order)
        assert tuned.final_rate("sinusoidal") == 1.0 and tuned.max_steps == (2000, 8000)
        assert tuned.choices["sinusoidal"].source == files[1]
        assert tuned.overrides == ("trainer.max_steps=8000",)  # the longest budget's grid
    (tmp_path / "final" / "lr2.0" / "all" / "sinusoidal" / "seed-2" / "metrics.json").unlink()
    shifted = tune(stores, check, None, echo=print)  # x1 wins with x2 not full: not final
    assert not shifted.variants["sinusoidal"].complete
    assert shifted.missing == [MissingRun("sinusoidal", 2.0, 2)]
    (command,) = shifted.commands  # not the short grid's run root: another budget
    assert "--root outputs/study_lr2_8000steps --records " in command
    assert command.endswith("-- optim.lr_scale=2.0 trainer.max_steps=8000")
    with pytest.raises(TuningError, match=r"both tuned sinusoidal at 2000 steps: pass one"):
        read_tuned_rates([files[0], files[0]])
    other = json.loads(files[1].read_text()) | {"overrides": ["model.d_ff=96"]}
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(TuningError, match=r"other.json tuned another .*model.d_ff: 512 -> 96"):
        read_tuned_rates([files[0], tmp_path / "other.json"])


@pytest.mark.parametrize(
    ("key", "value"), [("model.d_model", 256), ("trainer.max_steps", 4000), ("data.max_len", 100)]
)
def test_records_of_another_configuration_are_refused(tmp_path, capsys, key, value):
    store = tmp_path / "store"
    copy_record(1, store, 1.0)
    other = copy_record(2, store, 0.5)
    config = OmegaConf.load(other / ".hydra" / "config.yaml")
    OmegaConf.update(config, key, value)
    OmegaConf.save(config, other / ".hydra" / "config.yaml")
    if key == "trainer.max_steps":  # trained to that budget: another budget, not a short run
        metrics = json.loads((other / "metrics.json").read_text())
        (other / "metrics.json").write_text(json.dumps(metrics | {"steps": value}))
    main = script_main("study")
    with pytest.raises(SystemExit) as exit_:
        main(
            ["tune", "--stores", str(store), "--out", str(tmp_path / "out"), "--rates", "0.5", "1"]
        )
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and f"{key}:" in err[0]
    assert not (tmp_path / "out").exists()  # a refused command writes nothing


def test_overrides_the_records_were_not_trained_with_are_refused(tmp_path):
    protocol = Protocol(variants=("sinusoidal",), overrides=("trainer.max_steps=8000",))
    with pytest.raises(TuningError, match="trainer.max_steps: 2000 -> 8000"):
        tune([STORE, STORE_05], protocol, None, echo=lambda _: None)
    with pytest.raises(TuningError, match="optim.lr_scale"):  # the grid's own key
        tune([STORE], Protocol(overrides=("optim.lr_scale=0.1",)), None, echo=lambda _: None)
    with pytest.raises(TuningError, match="trainer.max_step=5 does not compose"):
        tune([STORE], Protocol(overrides=("trainer.max_step=5",)), None, echo=lambda _: None)
    with pytest.raises(TuningError, match="--seeds 1"):
        tune([STORE], Protocol(seeds=(1,)), None, echo=lambda _: None)
    with pytest.raises(StudyError, match="--experiment's grid"):  # the study's: `run` trains it
        launch_grid([STORE], Protocol(variants=("sinusoidal",)), ROOT / "results" / "never")
    assert not (ROOT / "results" / "never").exists()


def tiny_quickstart(cache_dir) -> list[str]:
    """The quickstart experiment shrunk to seconds: 2,000 toy pairs, a tiny model, 20 steps."""
    return [
        f"cache_dir={cache_dir}",
        "data.corpus.train_size=2000",
        "data.vocab_size=400",
        "model.d_model=64",
        "model.d_ff=128",
        "trainer.effective_tokens=1024",
        "trainer.max_minutes=null",
        "trainer.num_threads=1",
        "trainer.max_steps=20",
        "trainer.eval_every=10",
        "trainer.eval_bleu_sentences=5",
    ]


def test_a_users_own_experiment_plans_trains_launches_and_tunes(tmp_path, capsys, cache_dir):
    """--plan's train.py commands, run as printed, make the runs tune reads; --launch trains the
    rest (and the rate past the edge) through Hydra's launcher into the folders the plan names."""
    tiny = tiny_quickstart(cache_dir)
    grid = ["--experiment", "quickstart", "--variants", "sinusoidal", "--rates", "0.5", "1"]
    grid += ["--seeds", "1", "2", "--root", str(tmp_path / "grid")]
    main = script_main("study")
    main(["tune", "--plan", *grid, "--", *tiny])
    commands = [c for c in capsys.readouterr().out.splitlines() if c.startswith("python train.py")]
    assert len(commands) == 4 and not (tmp_path / "grid").exists()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    by_hand = [c for c in commands if not c.endswith("lr1/quickstart/sinusoidal/seed-2")]
    for command in by_hand:  # 3 of the 4 points, as printed
        words = shlex.split(command)
        subprocess.run(
            [sys.executable, *words[1:]], cwd=ROOT, env=env, check=True, capture_output=True
        )
    runs = {
        rate: [tmp_path / "grid" / tag / "quickstart" / "sinusoidal" / f"seed-{s}" for s in (1, 2)]
        for rate, tag in ((0.25, "lr025"), (0.5, "lr05"), (1.0, "lr1"))
    }
    trained = {d: (d / "metrics.json").stat().st_mtime_ns for d in [*runs[0.5], runs[1.0][0]]}
    with pytest.raises(SystemExit):  # a launcher without --launch: refused by the parser
        main(["tune", "--launcher", "basic", *grid, "--", *tiny])
    assert "--launch" in capsys.readouterr().err
    protocol = Protocol(
        experiment="quickstart", overrides=tuple(tiny), variants=("sinusoidal",),
        rates=(0.5, 1.0), root=tmp_path / "grid",
    )  # fmt: skip
    lines = []
    result = launch_grid(None, protocol, tmp_path / "out", echo=lines.append, rounds=1)
    assert {d: (d / "metrics.json").stat().st_mtime_ns for d in trained} == trained
    launched = [line for line in lines if "train.py --multirun" in line]
    # ×0.5 is the only complete rate, an edge: ×0.25 joins the grid; ×1 lacks seed 2
    assert len(launched) == 2
    assert "seed=1,2" in launched[0] and launched[0].endswith("optim.lr_scale=0.25")
    assert "seed=2 " in launched[1] and launched[1].endswith("optim.lr_scale=1.0")
    means = {rate: mean_ppl(*dirs) for rate, dirs in runs.items()}
    row = result.variants["sinusoidal"]
    assert row.chosen_lr_scale == min(means, key=means.get)
    assert [p.lr_scale for p in row.rates] == [0.25, 0.5, 1.0]
    written = json.loads((tmp_path / "out" / "tuning.json").read_text())
    assert written["variants"]["sinusoidal"] == asdict(row)
    out = plateau(runs[1.0], tmp_path / "plateau", 0.02, echo=lambda _: None)
    assert [r["curve"][-1][0] for r in out["runs"]] == [20, 20]
    assert all(len(r["curve"]) == 2 for r in out["runs"])
    final_runs_at_a_tuned_rate(protocol, tmp_path)


def final_runs_at_a_tuned_rate(protocol: Protocol, tmp_path: Path) -> None:
    """`run --experiment`: with ×0.25 and ×1 made worse (dev PPL + 100), ×0.5 is bracketed and
    final, and a final seed trains at it with the grid's overrides; done once, refused with
    other settings or another experiment."""
    for tag in ("lr025", "lr1"):
        for path in (protocol.root / tag).glob("quickstart/sinusoidal/seed-*/metrics.json"):
            metrics = json.loads(path.read_text())
            path.write_text(json.dumps(metrics | {"dev_ppl": metrics["dev_ppl"] + 100}))
    said = []
    tune(None, protocol, tmp_path / "tuned", echo=said.append)
    tuning = [tmp_path / "tuned" / "tuning.json"]
    assert f"run --experiment quickstart --tuning {tuning[0]} --seeds" in said[-1]
    main = script_main("study")
    final = main(["run", "--experiment", "quickstart", "--tuning", *map(str, tuning)]
                 + ["--seeds", "3", "--root", str(tmp_path / "final")])  # fmt: skip
    assert final == [tmp_path / "final" / "quickstart" / "sinusoidal" / "seed-3"]
    config = OmegaConf.load(final[0] / ".hydra" / "config.yaml")
    assert config.optim.lr_scale == 0.5 and config.model.d_model == 64  # the grid's overrides
    lines = []
    assert train_tuned(tuning, "quickstart", tmp_path / "final", [3], echo=lines.append) == final
    assert lines[0].startswith("study: 0 of 1 runs to train")
    with pytest.raises(StudyError, match="change what"):
        train_tuned(tuning, "quickstart", tmp_path / "final", [3], overrides=["model.d_ff=64"])
    with pytest.raises(StudyError, match="optim.lr_scale: 1.0 -> 0.5"):  # a ×1 run, finished
        train_tuned(tuning, "quickstart", protocol.root / "lr1", [1])
    with pytest.raises(StudyError, match="tuned experiment=quickstart"):
        train_tuned(tuning, "table3_base", tmp_path / "final", [3])


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


def test_plan_commands_name_stores_inside_the_checkout_relative_to_it(tmp_path):
    """The plan's commands run from the checkout: a store inside it is named relative to it."""
    assert in_checkout(STORE_05) == "results/archive/pe_study_lr05/runs"
    assert in_checkout(tmp_path / "store") == str(tmp_path / "store")
    stores = [STORE, STORE_05]
    assert study_store(1.0, [], stores) == ("outputs/study", "results/archive/pe_study/runs")
    assert study_store(2.0, [], stores, "_8000steps") == (  # a check at another budget
        "outputs/study_lr2_8000steps",
        "results/archive/pe_study_lr2_8000steps/runs",
    )
    a, b = tmp_path / "a", tmp_path / "b"  # a: sinusoidal x0.5, learned x1; b: sinusoidal x1
    held = [(a, "sinusoidal", 0.5), (a, "learned", 1.0), (b, "sinusoidal", 1.0)]
    runs = [GridRun(s / "all" / v / "seed-1", v, r, 1, 8000, 7.0, False, {}) for s, v, r in held]
    for variant, store in (("sinusoidal", b), ("learned", a)):  # a store: a variant at one rate
        assert study_store(1.0, runs, [a, b], "", [variant]) == ("outputs/study", str(store))
    assert budget_tag(Protocol(overrides=("trainer.max_steps=8000",))) == "_8000steps"
    assert budget_tag(Protocol(overrides=("trainer.eval_every=500",))) == ""


def test_a_grid_at_its_own_position_settings_is_read_apart_by_the_report():
    """The study's committed tuning files as the report reads them: SHAPE's grid at its K (a
    position.* setting the other variants lack) beside the others', each variant's choice from
    its own grid, row (E)'s from the check at the final budget; one variant at two Ks refused."""
    tuning = ROOT / "results" / "archive"
    files = [tuning / f"{name}/tuning.json" for name in ("pe_tuning", "pe_tuning_final")]
    shape = tuning / "pe_shape_tuning" / "tuning.json"
    choices = read_choices([*files, shape])
    assert choices["sinusoidal_shape"].source == shape
    assert choices["learned"].source == files[1] and choices["rope"].source == files[0]
    assert set(choices) == {*read_tuned_rates(files).choices, "sinusoidal_shape", "learned_shape"}
    with pytest.raises(
        TuningError,
        match=r"other position\.\* settings \(none; position\.max_shift=10\): .*on its own",
    ):
        read_tuned_rates([*files, shape])  # `run --tuning` trains with one grid's settings
    with pytest.raises(TuningError, match=r"tuned sinusoidal_shape at other position.\* settings"):
        read_choices([shape, tuning / "pe_shape_k100" / "tuning.json"])


def test_a_position_setting_is_compared_where_it_applies_and_named_where_it_does_not():
    """SHAPE's K against a grid without it: a difference at the SHAPE variant, and at a variant
    that has no K a named difference (not a traceback)."""
    shape = math_differences("pe_study_multi30k", [], ["position.max_shift=10"], ["learned_shape"])
    assert shape == ["position.max_shift: 100 -> 10"]
    (named,) = math_differences("pe_study_multi30k", [], ["position.max_shift=10"], ["sinusoidal"])
    assert named.startswith("position=sinusoidal: Could not override 'position.max_shift'")

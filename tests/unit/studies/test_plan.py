"""The study's plan: its conditions, which runs it makes, and the sweeps that train them."""

import pytest
from omegaconf import OmegaConf

from studies.plan import CONDITIONS, StudyError, planned_jobs
from studies.runner import sweep_command, sweeps, training_overrides
from tests.conftest import compose_config


def test_experiments_differ_only_in_their_condition():
    """One step budget and precision for every condition; only the condition's keys differ."""
    base = OmegaConf.to_container(compose_config([f"experiment={CONDITIONS['all']}"]))
    assert base["trainer"]["max_steps"] == 2000 and base["trainer"]["max_minutes"] is None
    assert base["trainer"]["precision"] == "fp32" and base["data"]["train_join_share"] is None
    expected = {"joined": {"train_join_share": 0.2}, "short": {"train_max_src_words": 10}}
    for condition, keys in expected.items():
        cfg = OmegaConf.to_container(compose_config([f"experiment={CONDITIONS[condition]}"]))
        assert {k: cfg["data"].get(k) for k in keys} == keys
        cfg["data"] = {k: v for k, v in cfg["data"].items() if k not in keys}
        assert cfg == base | {"data": {k: v for k, v in base["data"].items() if k not in keys}}


def test_plan_puts_row_e_first_and_gives_it_five_seeds(tmp_path):
    jobs = planned_jobs(tmp_path, ["all", "joined", "short"])
    all_runs = [j for j in jobs if j.condition == "all"]
    assert [(j.variant, j.seed) for j in all_runs[:4]] == [
        ("learned", 1),
        ("sinusoidal", 1),
        ("learned", 2),
        ("sinusoidal", 2),
    ]
    seeds = {}
    for job in all_runs:
        seeds.setdefault(job.variant, []).append(job.seed)
    assert seeds["sinusoidal"] == seeds["learned"] == [1, 2, 3, 4, 5]
    assert all(s == [1, 2, 3] for v, s in seeds.items() if v not in ("sinusoidal", "learned"))
    joined = [j for j in jobs if j.condition == "joined"]
    assert "none" not in {j.variant for j in joined} and {j.seed for j in joined} == {1, 2, 3}
    short = {j.variant for j in jobs if j.condition == "short"}
    assert "learned_shape" in seeds and "learned_shape" not in short | {j.variant for j in joined}
    assert "sinusoidal_shape" in short and len(jobs) == 31 + 21 + 24
    assert all_runs[0].run_dir == tmp_path / "all" / "learned" / "seed-1"


def test_a_bad_plan_is_one_line(tmp_path):
    with pytest.raises(StudyError, match="unknown position variant sinus"):
        planned_jobs(tmp_path, ["all"], ["sinus"])
    with pytest.raises(StudyError, match="--condition long"):
        planned_jobs(tmp_path, ["long"])
    with pytest.raises(StudyError, match=r"Hydra overrides go after --"):
        planned_jobs(tmp_path, ["all"], ["seed=3"])


def test_each_planned_run_is_in_exactly_one_sweep_of_the_runs_its_condition_needs(tmp_path):
    """The whole plan: row (E)'s five seeds in one sweep, the other variants' three in another;
    a sweep is a product of variants and seeds, so runs done already are in none."""
    jobs = planned_jobs(tmp_path, ["all", "short"])
    planned = {(j.condition, j.variant, j.seed) for j in jobs}
    for at_once in (None, 4, 2, 1):
        found = [
            (s.condition, v, seed)
            for s in sweeps(jobs, at_once)
            for v in s.variants
            for seed in s.seeds
        ]
        assert sorted(found) == sorted(planned)  # each run once, none beyond the plan
        assert at_once is None or all(s.size <= at_once for s in sweeps(jobs, at_once))
    whole = sweeps(jobs, None)
    assert [(s.condition, s.variants, s.seeds) for s in whole[:2]] == [
        ("all", ("learned", "sinusoidal"), (1, 2, 3, 4, 5)),
        (
            "all",
            ("alibi", "learned_shape", "none", "relative", "rope", "sinusoidal_shape", "t5"),
            (1, 2, 3),
        ),
    ]
    left = [j for j in jobs if (j.condition, j.variant, j.seed) != ("all", "learned", 3)]
    gapped = [s for s in sweeps(left, None) if s.condition == "all" and "learned" in s.variants]
    assert [(s.variants, s.seeds) for s in gapped] == [(("learned",), (1, 2, 4, 5))]


def test_a_sweep_writes_each_run_where_the_plan_puts_it(tmp_path):
    """One sweep's command: the condition's experiment, every variant and seed, the run folders
    <root>/<condition>/<variant>/seed-<s>, the launcher; overrides to Hydra reach only it."""
    (sweep,) = sweeps(planned_jobs(tmp_path, ["short"], ["rope", "t5"], [2, 3]), None)
    overrides = ["cache_dir=/c", "hydra.launcher.partition=gpu"]
    command = sweep_command(sweep, tmp_path, "slurm", 4, overrides)
    assert command[1].endswith("train.py") and command[2] == "--multirun"
    for item in (
        "hydra/launcher=slurm",
        "hydra.launcher.array_parallelism=4",
        "experiment=pe_study_multi30k_short",
        "position=rope,t5",
        "seed=2,3",
        f"hydra.sweep.dir={tmp_path / 'short'}",
        "hydra.sweep.subdir=${hydra.runtime.choices.position}/seed-${seed}",
    ):
        assert item in command
    assert command[-2:] == overrides
    assert training_overrides(overrides) == ["cache_dir=/c"]


def test_variants_at_different_tuned_rates_train_in_different_sweeps(tmp_path):
    """A sweep trains at one rate: the variants tune chose one rate for share a sweep, whose
    command ends with that rate; every run is still in exactly one sweep."""
    jobs = planned_jobs(tmp_path, ["all"], ["sinusoidal", "learned", "rope"], [1, 2])
    rates = {"sinusoidal": 0.5, "learned": 0.5, "rope": 1.0}
    found = sweeps(jobs, None, rates)
    assert sorted((s.lr_scale, s.variants) for s in found) == [
        (0.5, ("learned", "sinusoidal")),
        (1.0, ("rope",)),
    ]
    for sweep in found:
        command = sweep_command(sweep, tmp_path, "basic", 1, ["trainer.max_steps=8000"])
        assert command[-2:] == ["trainer.max_steps=8000", f"optim.lr_scale={sweep.lr_scale!r}"]
    assert sum(s.size for s in sweeps(jobs, 1, rates)) == len(jobs)
    assert all(len({rates[v] for v in s.variants}) == 1 for s in sweeps(jobs, 2, rates))


def test_a_setting_of_the_position_config_puts_each_variant_in_a_sweep_of_its_own(tmp_path):
    """Hydra composes a multirun's first config at the experiment's default position, where
    SHAPE's position.max_shift does not exist: such a sweep trains one variant; other overrides
    keep the variants together."""
    jobs = planned_jobs(tmp_path, ["all"], ["sinusoidal_shape", "learned_shape"], [1, 2])
    together = sweeps(jobs, None, None, ["optim.lr_scale=0.5"])
    assert [s.variants for s in together] == [("learned_shape", "sinusoidal_shape")]
    apart = sweeps(jobs, None, None, ["optim.lr_scale=0.5", "++position.max_shift=10"])
    assert sorted(s.variants for s in apart) == [("learned_shape",), ("sinusoidal_shape",)]
    assert all(s.seeds == (1, 2) for s in apart)

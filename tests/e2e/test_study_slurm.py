"""A tiny study on the local one-node SLURM cluster: its runs are sbatch jobs of one array."""

import subprocess

import pytest

from studies.runner import run_study
from tests.conftest import script_main
from tests.e2e.test_run_study import tiny_study
from tests.e2e.test_slurm import ONE_CPU_JOB, slurm  # noqa: F401  (the cluster fixture)
from tests.e2e.test_study import VARIANTS, tiny_overrides
from tests.unit.studies.test_tuning import tiny_quickstart


@pytest.mark.slow
def test_a_tiny_study_trains_through_sbatch_and_a_second_call_launches_nothing(
    slurm,  # noqa: F811
    tmp_path,
    cache_dir,
):
    root = tmp_path / "study"
    overrides = [*tiny_overrides(cache_dir), *ONE_CPU_JOB]
    lines = []
    records = run_study(root, ["all"], VARIANTS, [1], 2, overrides, lines.append, launcher="slurm")
    assert [(r.variant, r.step) for r in records] == [("learned", 20), ("sinusoidal", 20)]
    scripts = list((root / "all" / ".submitit").glob("*/*_submission.sh"))
    assert len(scripts) == 1  # one sbatch array for both runs
    script = scripts[0].read_text()
    assert "#SBATCH --array=0-1%2" in script and "#SBATCH --cpus-per-task=1" in script
    array_id = scripts[0].name.split("_")[0]
    accounted = subprocess.run(
        ["sacct", "-n", "-X", "-j", array_id, "-o", "State"], capture_output=True, text=True
    )
    if accounted.returncode == 0 and accounted.stdout.strip():  # where accounting is kept
        assert set(accounted.stdout.split()) == {"COMPLETED"}
    again = []
    run_study(root, ["all"], VARIANTS, [1], 2, overrides, again.append, launcher="slurm")
    assert not any("through hydra/launcher" in line for line in again)
    assert len(list((root / "all" / ".submitit").glob("*/*_submission.sh"))) == 1


@pytest.mark.slow
def test_a_users_grid_launches_through_sbatch_in_one_command(slurm, tmp_path, cache_dir):  # noqa: F811
    """`tune --launch --launcher slurm`: the missing points as one sbatch array, in the folders
    the plan names, then tuning.json; the launcher's overrides stay out of the grid's settings."""
    grid, out = tmp_path / "grid", tmp_path / "out"
    result = script_main("study")(
        ["tune", "--launch", "--launcher", "slurm", "--jobs", "2", "--rounds", "1"]
        + ["--experiment", "quickstart", "--variants", "sinusoidal", "--rates", "0.5"]
        + ["--root", str(grid), "--out", str(out), "--", *tiny_quickstart(cache_dir), *ONE_CPU_JOB]
    )
    scripts = list((grid / "lr05" / "quickstart" / ".submitit").glob("*/*_submission.sh"))
    assert len(scripts) == 1 and "#SBATCH --array=0-1%2" in scripts[0].read_text()
    point = result.variants["sinusoidal"].rates
    assert [(p.lr_scale, p.n) for p in point] == [(0.5, 2)]
    runs = [grid / "lr05" / "quickstart" / "sinusoidal" / f"seed-{s}" for s in (1, 2)]
    assert all((run / "metrics.json").is_file() for run in runs)
    assert not any(o.startswith("hydra.") for o in result.overrides)
    # one round: ×0.5 is an edge, so ×0.25 is still missing and the choice is not final
    assert [m.lr_scale for m in result.missing] == [0.25, 0.25]


@pytest.mark.slow
def test_a_declared_study_runs_through_sbatch_and_a_second_call_submits_nothing(
    slurm,  # noqa: F811
    tmp_path,
    cache_dir,
):
    """`run_study.py --launcher slurm`: every point an sbatch job, the finals recorded and
    scored; the same command again submits no job."""
    study = tiny_study(tmp_path)
    work, results = tmp_path / "work", tmp_path / "results"
    args = [str(study), "--launcher", "slurm", "--jobs", "2", "--work", str(work)]
    args += ["--results", str(results), "--", f"cache_dir={cache_dir}", *ONE_CPU_JOB]
    assert script_main("run_study")(args) == 0
    submitted = sorted(work.glob("tiny/**/.submitit/*/*_submission.sh"))
    assert len(submitted) == 4  # the grid's 2 points and the check's 2 (also the finals)
    assert all("#SBATCH --cpus-per-task=1" in s.read_text() for s in submitted)
    finals = sorted((results / "tiny" / "final" / "runs").glob("all/*/seed-*/scores.json"))
    assert len(finals) == 2
    assert script_main("run_study")(args) == 0
    assert sorted(work.glob("tiny/**/.submitit/*/*_submission.sh")) == submitted

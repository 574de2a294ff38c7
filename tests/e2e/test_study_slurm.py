"""A tiny declared study on the local one-node SLURM cluster: its runs are sbatch jobs."""

import pytest

from tests.conftest import script_main
from tests.e2e.test_run_study import tiny_study
from tests.e2e.test_slurm import ONE_CPU_JOB, slurm  # noqa: F401  (the cluster fixture)


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

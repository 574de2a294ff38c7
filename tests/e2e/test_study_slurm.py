"""A tiny study on the local one-node SLURM cluster: its runs are sbatch jobs of one array."""

import subprocess

import pytest

from studies.runner import run_study
from tests.e2e.test_slurm import ONE_CPU_JOB, slurm  # noqa: F401  (the cluster fixture)
from tests.e2e.test_study import VARIANTS, tiny_overrides


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

"""Sweeps through the submitit launchers on a real one-node SLURM cluster and locally.

The cluster is the one `bash scripts/local_slurm.sh start` sets up (slurm-wlm + munge on this
machine); where sbatch is absent, or the cluster cannot be started, these tests skip and say so.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from runs.checkpoint import load_checkpoint
from runs.record import read_segments
from tests.conftest import ROOT, compose_config, tiny_run_overrides
from training.launch import train

# The README's sweep, shrunk: a tiny model, a few steps, one CPU and one task per job.
SWEEP = ["position=sinusoidal,learned", "seed=1,2"]
ONE_CPU_JOB = [
    "trainer.device=cpu",  # a job without a GPU trains on the CPU as asked (else: refused)
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.tasks_per_node=1",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=2",
    "hydra.launcher.timeout_min=10",
]


def cluster_up() -> bool:
    result = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    return result.returncode == 0 and any(s in result.stdout for s in ("idle", "mix", "alloc"))


LOCAL_SLURM = ["bash", str(ROOT / "scripts" / "local_slurm.sh")]


@pytest.fixture(scope="module")
def slurm():
    """A running SLURM cluster: the one there is, or the local one started (and stopped) here."""
    if shutil.which("sbatch") is None:
        pytest.skip("sbatch is absent: `bash scripts/local_slurm.sh start` installs a local SLURM")
    if cluster_up():
        yield
        return
    if os.geteuid() != 0 and subprocess.run(["sudo", "-n", "true"]).returncode != 0:
        pytest.skip("no SLURM node is idle, and starting the local one needs root or sudo")
    started = subprocess.run([*LOCAL_SLURM, "start"], capture_output=True, text=True)
    if started.returncode != 0 or not cluster_up():
        pytest.skip(f"no SLURM node is idle and local_slurm.sh start failed: {started.stderr}")
    yield
    subprocess.run([*LOCAL_SLURM, "stop"], capture_output=True)


def job_overrides(cache_dir: Path, *extra: str) -> list[str]:
    """tiny_run_overrides for a sweep job: its run directory is Hydra's sweep subfolder."""
    overrides = tiny_run_overrides(Path("unused"), cache_dir, *extra)
    return [o for o in overrides if not o.startswith("run_dir=")]


def prepare_cache(cache_dir: Path, overrides: list[str]) -> None:
    """Tokenizer and encoded corpus made once here, so concurrent jobs only read the cache."""
    from data.corpus import prepare_data

    cfg = compose_config([*overrides, "run_dir=unused"])
    prepare_data(cfg.data, cfg.cache_dir)


def sweep(launcher: str, sweep_dir: Path, overrides: list[str], watch_squeue: bool, timeout=600):
    """Run `train.py -m hydra/launcher=<launcher> ...`; return (result, job ids squeue showed)."""
    command = [sys.executable, "train.py", "-m", f"hydra/launcher={launcher}", *overrides]
    command.append(f"hydra.sweep.dir={sweep_dir}")
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen, deadline = set(), time.monotonic() + timeout
    while watch_squeue and process.poll() is None and time.monotonic() < deadline:
        queue = subprocess.run(
            ["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True
        ).stdout
        seen |= {line.split()[0] for line in queue.splitlines() if line.endswith(" train")}
        time.sleep(1)
    try:
        output, _ = process.communicate(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"the sweep did not end within {timeout} s:\n{output[-3000:]}")
    return process.returncode, output, seen


def completed_runs(sweep_dir: Path) -> dict[tuple[str, int], dict]:
    """metrics.json of every run in a sweep folder, by (position, seed) from its overrides."""
    runs = {}
    for metrics in sweep_dir.glob("*/metrics.json"):
        overrides = yaml.safe_load((metrics.parent / ".hydra" / "overrides.yaml").read_text())
        values = dict(o.split("=", 1) for o in overrides)
        runs[(values["position"], int(values["seed"]))] = json.loads(metrics.read_text())
    return runs


EXPECTED = {(p, s) for p in ("sinusoidal", "learned") for s in (1, 2)}


@pytest.mark.slow
def test_readme_sweep_runs_every_job_through_sbatch(slurm, tmp_path, cache_dir):
    overrides = job_overrides(cache_dir, "trainer.max_steps=3", "data.corpus.train_size=300")
    prepare_cache(cache_dir, overrides)
    sweep_dir = tmp_path / "sweep"
    code, output, seen = sweep("slurm", sweep_dir, [*overrides, *SWEEP, *ONE_CPU_JOB], True)
    assert code == 0, output[-3000:]
    runs = completed_runs(sweep_dir)
    assert set(runs) == EXPECTED, output[-3000:]
    assert all(m["complete"] and m["steps"] == 3 for m in runs.values())
    # one sbatch array of four tasks: its script, and each task's log, name a SLURM job id
    scripts = list((sweep_dir / ".submitit").glob("*/*_submission.sh"))
    assert len(scripts) == 1
    script = scripts[0].read_text()
    for line in ("--array=0-3", "--ntasks-per-node=1", "--cpus-per-task=1", "--signal=USR2@120"):
        assert f"#SBATCH {line}" in script.replace("%256", "")
    array_id = scripts[0].name.split("_")[0]
    logs = sorted((sweep_dir / ".submitit").glob(f"{array_id}_*/*_log.out"))
    assert len(logs) == 4
    assert seen and all(job.startswith(array_id) for job in seen)  # squeue showed them running


@pytest.mark.slow
def test_readme_sweep_runs_with_the_local_submitit_launcher(tmp_path, cache_dir):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    overrides = job_overrides(cache_dir, "trainer.max_steps=3", "data.corpus.train_size=300")
    prepare_cache(cache_dir, overrides)
    sweep_dir = tmp_path / "sweep"
    code, output, _ = sweep("submitit_local", sweep_dir, [*overrides, *SWEEP], False)
    assert code == 0, output[-3000:]
    runs = completed_runs(sweep_dir)
    assert set(runs) == EXPECTED, output[-3000:]
    assert all(m["complete"] and m["steps"] == 3 for m in runs.values())


@pytest.mark.slow
def test_a_job_slurm_signals_checkpoints_is_requeued_and_ends_bitwise(slurm, tmp_path, cache_dir):
    """scancel --signal=USR2 (what SLURM sends before the time limit) -> requeue -> resume."""
    steps = 80
    small = ["model.d_model=32", "model.d_ff=64", "data.corpus.train_size=1000"]
    overrides = job_overrides(
        cache_dir, *small, f"trainer.max_steps={steps}", "trainer.log_every=1"
    )
    prepare_cache(cache_dir, overrides)
    sweep_dir = tmp_path / "sweep"
    command = [sys.executable, "train.py", "-m", "hydra/launcher=slurm", *overrides, *ONE_CPU_JOB]
    command += ["position=sinusoidal", "seed=1", f"hydra.sweep.dir={sweep_dir}"]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 300
    while not any("step 5 loss" in p.read_text() for p in sweep_dir.glob("*/train.log")):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[0]
        time.sleep(0.2)
    # <job id>_<task>_log.out: the job id is "N" for one job, "N_0" for an array of one
    (job_id,) = {p.name.rsplit("_", 2)[0] for p in sweep_dir.glob(".submitit/*/*_log.out")}
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output[-3000:]

    (run_dir,) = (p.parent for p in sweep_dir.glob("*/train.log"))
    log = (run_dir / "train.log").read_text()
    stopped = re.search(r"interrupted by SIGUSR2 after step (\d+)", log)
    assert stopped and f"resumed from step {stopped.group(1)}" in log, log[-3000:]
    assert 5 <= int(stopped.group(1)) < steps
    first, second = read_segments(run_dir)  # the requeued job's segment ended on record too
    assert first["end_step"] == int(stopped.group(1)) == second["start_step"]
    assert first["outcome"].startswith("interrupted by SIGUSR2; checkpoint ")
    assert second["outcome"] == f"trainer.max_steps={steps} reached"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["complete"] and metrics["steps"] == steps
    restarts = subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True
    ).stdout
    assert "Restarts=1" in restarts, restarts

    straight = tmp_path / "straight"
    train(compose_config([*overrides, "position=sinusoidal", "seed=1", f"run_dir={straight}"]))
    a = load_checkpoint(straight / "checkpoints" / "last.pt")
    b = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert a["step"] == b["step"] == steps
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_the_slurm_launcher_config_holds_only_the_plugins_keys():
    """slurm.yaml lists only the plugin's keys: a typo fails here, not on a cluster."""
    plugin = pytest.importorskip("hydra_plugins.hydra_submitit_launcher.config")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from tests.conftest import CONFIG_DIR

    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG_DIR)):
        cfg = compose("train", ["hydra/launcher=slurm"], return_hydra_config=True)
    assert set(cfg.hydra.launcher) <= set(OmegaConf.structured(plugin.SlurmQueueConf))
    assert cfg.hydra.launcher.max_num_timeout > 0  # a timed-out job is requeued


def test_a_sweep_without_gpus_on_a_gpu_device_submits_and_makes_nothing(tmp_path):
    """hydra/launcher=submitit_slurm (the plugin's config: no GPU) with trainer.device=auto:
    one error line before anything is submitted or made; no cluster is needed to see it."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    sweep_dir = tmp_path / "sweep"
    command = [sys.executable, "train.py", "-m", "hydra/launcher=submitit_slurm"]
    command += [
        "experiment=quickstart",
        "position=sinusoidal,learned",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("error: hydra/launcher=submitit_slurm asks SLURM for no GPU")
    assert not sweep_dir.exists()

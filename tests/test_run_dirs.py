"""One run, one directory: unique default folders per launch, and a live run's folder locked.

Real command lines (`python train.py ...`), run from a scratch working directory so their
default `outputs/` folders land there.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from data.corpus import prepare_data
from tests.conftest import ROOT, compose_config
from tests.test_reliability import quick_overrides
from tests.test_run_directory import hold_lock


def launch(cwd: Path, overrides: list[str]) -> subprocess.Popen:
    """`python <ROOT>/train.py <overrides>` started in cwd."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *overrides],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_launches_in_the_same_second_get_two_folders(tmp_path, cache_dir):
    overrides = quick_overrides(cache_dir, "trainer.max_steps=2")
    prepare_data(compose_config(overrides).data, cache_dir, log=lambda _: None)  # warm the cache
    procs = {seed: launch(tmp_path, [*overrides, f"seed={seed}"]) for seed in (1, 2)}
    for proc in procs.values():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    runs = sorted(p.parent for p in tmp_path.glob("outputs/*/*/metrics.json"))
    assert len(runs) == 2, runs
    seeds = {json.loads((run / "metrics.json").read_text())["seed"]: run for run in runs}
    assert sorted(seeds) == [1, 2]
    for seed, proc in procs.items():
        assert seeds[seed].name.endswith(f"-{proc.pid}")  # <time>-<process id>
        steps = sorted(p.name for p in (seeds[seed] / "checkpoints").glob("step_*.pt"))
        assert steps == ["step_1.pt", "step_2.pt"]


def test_a_second_process_on_a_live_run_directory_is_refused_and_deletes_nothing(
    tmp_path, cache_dir
):
    run_dir = tmp_path / "live"
    in_flight = run_dir / "checkpoints" / ".last.pt.x1y2z3.tmp"  # the live run's save under way
    in_flight.parent.mkdir(parents=True)
    in_flight.write_bytes(b"half a checkpoint")
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text("- the live run's overrides\n")
    holder = hold_lock(run_dir)
    try:
        second = launch(tmp_path, [*quick_overrides(cache_dir), f"hydra.run.dir={run_dir}"])
        _, err = second.communicate(timeout=300)
    finally:
        holder.kill()
        holder.wait()
    lines = [line for line in err.splitlines() if line.strip()]
    assert second.returncode == 1 and "Traceback" not in err, err[-3000:]
    assert lines[-1].startswith(f"error: run directory {run_dir} is in use by process {holder.pid}")
    assert in_flight.read_bytes() == b"half a checkpoint"
    assert (run_dir / ".hydra" / "overrides.yaml").read_text() == "- the live run's overrides\n"
    assert not (run_dir / "metrics.json").exists() and not (run_dir / "data.json").exists()


def test_a_sweep_with_a_folder_name_past_255_bytes_runs(tmp_path, cache_dir):
    note = "n" * 300  # a long override: its folder name would pass the file system's limit
    overrides = [*quick_overrides(cache_dir, "trainer.max_steps=1"), f"+note={note}"]
    proc = launch(tmp_path, ["-m", *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    (job,) = [p.parent for p in (tmp_path / "sweep").glob("*/metrics.json")]
    assert len(job.name.encode()) <= 255 and note[:100] in job.name
    assert f"+note={note}" in (job / ".hydra" / "overrides.yaml").read_text()


def test_an_unwritable_run_directory_is_one_line(tmp_path, cache_dir):
    (tmp_path / "file").write_text("")
    proc = launch(tmp_path, [*quick_overrides(cache_dir), f"hydra.run.dir={tmp_path}/file/run"])
    _, err = proc.communicate(timeout=300)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 1 and "Traceback" not in err, err[-3000:]
    assert lines == [
        f"error: hydra.run.dir={tmp_path}/file/run: cannot write there (Not a "
        "directory); pass a writable directory as hydra.run.dir"
    ]

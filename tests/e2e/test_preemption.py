"""Preemption: real SIGTERM/SIGINT to a training process -> checkpoint, one line, resume bitwise."""

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from runs.checkpoint import load_checkpoint
from runs.preemption import StopSignals
from runs.record import read_segments
from tests.conftest import ROOT, compose_config, tiny_run_overrides
from training.launch import train

SMALL = ["model.d_model=32", "model.d_ff=64", "data.corpus.train_size=1000"]
STEPS = 400  # far more than the run reaches before its signal


def overrides(cache_dir: Path, *extra: str) -> list[str]:
    """A tiny run that logs every step; its run directory is set per call."""
    base = tiny_run_overrides(Path("unused"), cache_dir, *SMALL, "trainer.log_every=1", *extra)
    return [o for o in base if not o.startswith("run_dir=")]


def start_training(run_dir: Path, cache_dir: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "train.py", *overrides(cache_dir, *extra)]
    command.append(f"hydra.run.dir={run_dir}")
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for_step(process: subprocess.Popen, run_dir: Path, step: int, timeout=180) -> None:
    """Block until train.log shows the given step (training is under way)."""
    deadline = time.monotonic() + timeout
    log = run_dir / "train.log"
    while f"step {step} loss" not in (log.read_text() if log.exists() else ""):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"no step {step} in {log}: {process.communicate()[0][-3000:]}")
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_checkpoints_the_step_and_resuming_is_bitwise(signum, tmp_path, cache_dir):
    prepare = compose_config([*overrides(cache_dir), f"run_dir={tmp_path / 'warm'}"])
    from data.corpus import prepare_data

    prepare_data(prepare.data, prepare.cache_dir)  # the cache is warm: the run starts at once
    run_dir = tmp_path / "interrupted"
    process = start_training(run_dir, cache_dir, f"trainer.max_steps={STEPS}")
    wait_for_step(process, run_dir, 5)
    process.send_signal(signum)
    stderr, _ = process.communicate(timeout=120)
    assert process.returncode == 128 + signum, stderr[-3000:]  # 143 / 130: not complete

    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    stopped = state["step"]
    logged = [line for line in stderr.splitlines() if "interrupted by" in line]
    assert len(logged) == 1, stderr[-3000:]
    assert f"interrupted by {signum.name} after step {stopped}: checkpoint " in logged[0]
    assert str(run_dir / "checkpoints" / "last.pt") in logged[0]
    assert "resume: python train.py " in logged[0] and f"hydra.run.dir={run_dir}" in logged[0]
    assert "Traceback" not in stderr
    assert 5 <= stopped < STEPS and not (run_dir / "metrics.json").exists()
    # the step in progress completed: the log's last step is the checkpoint's
    steps = re.findall(r"\] - step (\d+) loss", (run_dir / "train.log").read_text())
    assert int(steps[-1]) == stopped
    (segment,) = read_segments(run_dir)  # it ended on record, where the checkpoint is
    assert segment["end_step"] == stopped and segment["wall_seconds"] > 0
    assert (
        segment["outcome"]
        == f"interrupted by {signum.name}; checkpoint {run_dir}/checkpoints/last.pt"
    )

    end = stopped + 6
    resumed = train(
        compose_config([*overrides(cache_dir, f"trainer.max_steps={end}"), f"run_dir={run_dir}"])
    )
    straight_dir = tmp_path / "straight"
    train(
        compose_config(
            [*overrides(cache_dir, f"trainer.max_steps={end}"), f"run_dir={straight_dir}"]
        )
    )
    a = load_checkpoint(straight_dir / "checkpoints" / "last.pt")
    b = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert resumed["complete"] and a["step"] == b["step"] == end
    assert torch.equal(a["rng"]["torch"][0], b["rng"]["torch"][0])
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_a_second_sigint_exits_at_once(tmp_path, cache_dir):
    # steps of 16 micro-batches: the second Ctrl-C lands inside the step the first one let finish
    run_dir = tmp_path / "run"
    extra = ["trainer.update_freq=16", "model.d_model=128", "model.d_ff=512"]
    process = start_training(run_dir, cache_dir, f"trainer.max_steps={STEPS}", *extra)
    wait_for_step(process, run_dir, 2)
    process.send_signal(signal.SIGINT)
    message = process.stdout.readline()
    while "stopping after this step" not in message:
        message = process.stdout.readline()
        assert message, "the first SIGINT printed nothing"
    assert "Ctrl-C again exits at once" in message
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=60)
    # ended by the signal itself (the default handler, at once), not by finishing its step
    assert process.returncode == -signal.SIGINT
    assert not (run_dir / "metrics.json").exists()


def test_stop_signals_restore_the_handlers_they_replaced():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)}
    with StopSignals() as stop:
        assert signal.getsignal(signal.SIGTERM) == stop._handle
        signal.raise_signal(signal.SIGUSR2)
        assert stop.stop_signal() == signal.SIGUSR2
    assert {s: signal.getsignal(s) for s in before} == before

"""DDP over two gloo ranks: one step equals one process over both batches; per-rank RNG."""

import socket
import subprocess
import sys

import pytest
import torch

from runs.checkpoint import load_checkpoint
from tests.conftest import ROOT, compose_config, tiny_run_overrides
from training.launch import train


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_rank_ddp_step_equals_one_process_over_the_whole_batch(tmp_path, cache_dir):
    common = ["model.dropout=0.0", "trainer.max_steps=1", "data.corpus.train_size=400"]
    single = tmp_path / "single"
    train(compose_config(tiny_run_overrides(single, cache_dir, *common, "trainer.update_freq=2")))

    ddp = tmp_path / "ddp"
    overrides = tiny_run_overrides(ddp, cache_dir, *common, "trainer.update_freq=1")
    overrides = [o for o in overrides if not o.startswith("run_dir=")] + [f"hydra.run.dir={ddp}"]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    command += [f"--master_port={free_port()}", "train.py", *overrides]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]

    a = load_checkpoint(single / "checkpoints" / "last.pt")
    b = load_checkpoint(ddp / "checkpoints" / "last.pt")
    assert a["step"] == b["step"] == 1 and b["config"]["data"]["max_tokens"] == 1024
    assert a["tokens_seen"] == b["tokens_seen"]  # the same two batches, split over two ranks
    for name, tensor in a["model"].items():
        assert torch.allclose(tensor, b["model"][name], atol=1e-5), name
    written = {p.name for p in ddp.iterdir()}
    assert written == {p.name for p in single.iterdir()} | {".hydra", "train.log"}
    assert "run directory" in (ddp / "train.log").read_text()  # rank 0's log, written once


def torchrun(run_dir, cache_dir, *extra: str) -> None:
    """A two-rank gloo run of train.py in run_dir."""
    overrides = [o for o in tiny_run_overrides(run_dir, cache_dir, *extra) if "run_dir=" not in o]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    command += [f"--master_port={free_port()}", "train.py", *overrides, f"hydra.run.dir={run_dir}"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow  # three two-rank runs: about 2 minutes on 2 cores
def test_each_rank_draws_its_own_dropout_and_a_resumed_ddp_run_is_bitwise(tmp_path, cache_dir):
    common = ["model.dropout=0.3", "data.corpus.train_size=400", "trainer.update_freq=1"]
    torchrun(tmp_path / "straight", cache_dir, *common, "trainer.max_steps=4")
    torchrun(tmp_path / "resumed", cache_dir, *common, "trainer.max_steps=2")
    first = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")
    rank0, rank1 = first["rng"]["torch"]  # every rank's CPU state: seeds 1 and 2, advanced
    assert not torch.equal(rank0, rank1)
    assert first["rng"]["cuda"] is None  # a CPU run has no CUDA state to keep
    torchrun(tmp_path / "resumed", cache_dir, *common, "trainer.max_steps=4")
    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")
    assert a["step"] == b["step"] == 4
    for r in range(2):
        assert torch.equal(a["rng"]["torch"][r], b["rng"]["torch"][r])
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name

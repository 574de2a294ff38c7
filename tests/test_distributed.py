"""DDP: one step over two gloo ranks equals one process accumulating both ranks' batches."""

import socket
import subprocess
import sys

import torch

from model.checkpoint import load_checkpoint
from tests.conftest import ROOT, compose_config, tiny_run_overrides
from train import train


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

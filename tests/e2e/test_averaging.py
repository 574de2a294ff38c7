"""Table 2 averaging: evenly spaced step checkpoints, the final weights among them."""

import os
import subprocess
import sys

import torch

from runs.checkpoint import load_checkpoint, step_checkpoints
from runs.run import load_run
from tests.conftest import ROOT, compose_config, tiny_run_overrides
from training.launch import train

SMALL = ["model.d_model=32", "model.d_ff=64", "data.corpus.train_size=600"]


def run(run_dir, cache_dir, *extra):
    return train(compose_config(tiny_run_overrides(run_dir, cache_dir, *SMALL, *extra)))


def test_step_files_every_save_every_steps_and_at_the_end(tmp_path, cache_dir):
    # a save every few milliseconds by the clock: with save_every_steps set it only refreshes
    # last.pt, so the step files stay evenly spaced, plus the final step
    run(
        tmp_path,
        cache_dir,
        "trainer.max_steps=10",
        "trainer.save_every_steps=4",
        "trainer.save_every_minutes=0.0001",
    )
    ckpt_dir = tmp_path / "checkpoints"
    assert [p.name for p in step_checkpoints(ckpt_dir)] == ["step_4.pt", "step_8.pt", "step_10.pt"]
    last, final = load_checkpoint(ckpt_dir / "last.pt"), load_checkpoint(ckpt_dir / "step_10.pt")
    for name, tensor in last["model"].items():
        assert torch.equal(tensor, final["model"][name]), name

    state, tag = load_run(tmp_path, "avg:2")
    assert tag == "avg2" and state["averaged"] == [str(ckpt_dir / f"step_{s}.pt") for s in (8, 10)]
    out = tmp_path / "avg2.pt"
    command = [sys.executable, "scripts/average_checkpoints.py", "--run-dir", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the script runs from the checkout
    subprocess.run([*command, "--last", "2", "--out", str(out)], cwd=ROOT, env=env, check=True)
    on_disk = load_checkpoint(out)
    assert on_disk["averaged"] == state["averaged"]
    eight = load_checkpoint(ckpt_dir / "step_8.pt")["model"]
    for name, tensor in on_disk["model"].items():
        expected = ((eight[name].double() + final["model"][name].double()) / 2).float()
        assert torch.allclose(tensor, expected, atol=1e-7), name


def test_without_save_every_steps_the_clock_writes_the_step_files(tmp_path, cache_dir):
    run(
        tmp_path,
        cache_dir,
        "trainer.max_steps=3",
        "trainer.save_every_steps=null",
        "trainer.save_every_minutes=0.0001",
    )
    names = [p.name for p in step_checkpoints(tmp_path / "checkpoints")]
    assert names == ["step_1.pt", "step_2.pt", "step_3.pt"]


def test_averaging_names_a_step_file_copied_over_another(tmp_path, cache_dir, capsys):
    """Probe 3-21: step_10.pt copied over step_8.pt was refused as a duplicate of the genuine
    step_10.pt ("leave out step_10.pt"), not as a file the run never wrote under that name."""
    import shutil

    import pytest

    from tests.conftest import script_main

    run(tmp_path / "run", cache_dir, "trainer.max_steps=10", "trainer.save_every_steps=4")
    checkpoints = tmp_path / "run" / "checkpoints"
    shutil.copyfile(checkpoints / "step_10.pt", checkpoints / "step_8.pt")
    out = tmp_path / "avg.pt"
    with pytest.raises(SystemExit) as raised:
        script_main("average_checkpoints")(
            ["--run-dir", str(tmp_path / "run"), "--last", "2", "--out", str(out)]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert raised.value.code == 1 and not out.exists()
    assert err[-1].startswith(f"error: {checkpoints / 'step_8.pt'} is not the step_8.pt this"), err

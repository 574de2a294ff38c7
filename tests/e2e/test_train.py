"""train.py: a real tiny run, bitwise resume, stopping rules, bf16, fp16 and torch.compile."""

import json
import math
import subprocess
import sys

import pytest
import torch

from common.errors import UserError
from runs.checkpoint import load_checkpoint, step_checkpoints
from tests.conftest import ROOT, compose_config, tiny_run_overrides
from training.launch import train


def test_a_tiny_run_writes_metrics_checkpoints_and_logs(trained_run):
    metrics = json.loads((trained_run / "metrics.json").read_text())
    assert metrics["complete"] is True and metrics["steps"] == 240
    assert metrics["dev_ppl"] < 400 / 4  # far better than uniform over the vocabulary
    assert metrics["position"] == "SinusoidalPositionEncoding" and metrics["tokens_seen"] > 0
    assert 0 <= metrics["dev_bleu_greedy"] <= 100 and metrics["wall_seconds"] > 0
    ckpt_dir = trained_run / "checkpoints"
    assert (ckpt_dir / "last.pt").is_file() and (ckpt_dir / "best.pt").is_file()
    assert [p.name for p in step_checkpoints(ckpt_dir)] == [
        f"step_{s}.pt" for s in (80, 120, 160, 200, 240)
    ]
    state = load_checkpoint(ckpt_dir / "last.pt")
    assert state["step"] == 240 and state["config"]["model"]["d_model"] == 64
    assert state["tokenizer"]["sha256"] and state["sampler"]["epoch"] >= 0
    assert any((trained_run / "tensorboard").iterdir())
    data = json.loads((trained_run / "data.json").read_text())
    assert data["train_cleaning"]["kept"] == data["splits"]["train"] == 3000


def test_resume_reaches_bitwise_the_same_parameters(tmp_path, cache_dir):
    tiny = [
        "model.d_model=32",
        "model.d_ff=64",
        "trainer.eval_every=5",
        "data.corpus.train_size=1000",
    ]

    def run(run_dir, steps):
        return train(
            compose_config(
                tiny_run_overrides(run_dir, cache_dir, *tiny, f"trainer.max_steps={steps}")
            )
        )

    run(tmp_path / "straight", 12)
    run(tmp_path / "stopped", 7)
    resumed = run(tmp_path / "stopped", 12)
    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "stopped" / "checkpoints" / "last.pt")
    assert resumed["steps"] == b["step"] == a["step"] == 12
    assert b["schedule"]["last_epoch"] == a["schedule"]["last_epoch"] == 12
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_max_epochs_stops_the_run(tmp_path, cache_dir):
    overrides = ["data.corpus.train_size=300", "trainer.max_epochs=1", "trainer.max_steps=100000"]
    metrics = train(compose_config(tiny_run_overrides(tmp_path, cache_dir, *overrides)))
    assert metrics["epochs"] == 1 and 0 < metrics["steps"] < 100
    assert math.isfinite(metrics["dev_ppl"])


def test_unknown_language_is_one_clear_error(tmp_path, cache_dir):
    with pytest.raises(UserError, match="fr"):
        train(compose_config(tiny_run_overrides(tmp_path, cache_dir, "data.src_lang=fr")))


def test_bf16_autocast_on_cpu_trains(tmp_path, cache_dir):
    overrides = ["trainer.precision=bf16", "trainer.max_steps=6", "data.corpus.train_size=300"]
    metrics = train(compose_config(tiny_run_overrides(tmp_path, cache_dir, *overrides)))
    assert metrics["steps"] == 6 and math.isfinite(metrics["train_loss"])
    state = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert all(t.dtype == torch.float32 for t in state["model"].values())  # fp32 master weights


def test_compiled_training_saves_weights_evaluate_loads(tmp_path, cache_dir, monkeypatch):
    """trainer.compile=true through torch.compile's tracing (aot_eager: no C++ build, seconds)."""
    from runs.run import load_run, rebuild_model

    compiled = []
    real_compile = torch.compile

    def compile_for_test(model, **kwargs):
        compiled.append(model)
        return real_compile(model, backend="aot_eager", **kwargs)

    monkeypatch.setattr(torch, "compile", compile_for_test)
    overrides = ["trainer.compile=true", "trainer.max_steps=4", "data.corpus.train_size=300"]
    metrics = train(compose_config(tiny_run_overrides(tmp_path, cache_dir, *overrides)))
    assert len(compiled) == 1 and metrics["steps"] == 4 and math.isfinite(metrics["train_loss"])
    state, _ = load_run(tmp_path, "last")
    assert set(state["model"]) == set(compiled[0].state_dict())  # no "_orig_mod." prefixes
    model, _ = rebuild_model(state, torch.device("cpu"))
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state["model"][name]), name


def test_fp16_resumes_bitwise_with_its_gradient_scaler(tmp_path, cache_dir):
    """trainer.precision=fp16 (here on the CPU): the GradScaler's state rides in every
    checkpoint, so a resumed run ends bitwise where a straight one does; a resume in another
    precision is refused; evaluate.py searches in fp16 and records it."""
    from evaluation.evaluate import evaluate_run
    from runs.resume import ResumeError

    tiny = ["model.d_model=32", "model.d_ff=64", "trainer.eval_every=5", "trainer.precision=fp16"]
    tiny += ["data.corpus.train_size=1000", "+data.corpus.validation_size=20"]
    tiny += ["+data.corpus.test_size=20"]

    def run(run_dir, steps, *extra):
        overrides = tiny_run_overrides(run_dir, cache_dir, *tiny, f"trainer.max_steps={steps}")
        return train(compose_config([*overrides, *extra]))

    run(tmp_path / "straight", 12)
    run(tmp_path / "stopped", 7)
    resumed = run(tmp_path / "stopped", 12)
    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "stopped" / "checkpoints" / "last.pt")
    assert resumed["steps"] == b["step"] == a["step"] == 12
    assert a["precision"] == b["precision"] == "fp16"
    assert a["scaler"] == b["scaler"] and b["scaler"]["_growth_tracker"] > 5  # not a new one
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    with pytest.raises(ResumeError, match=r"precision \(trainer.precision on this device\): fp16"):
        run(tmp_path / "stopped", 14, "trainer.precision=fp32")
    scores = evaluate_run(tmp_path / "straight", "split=test", "precision=fp16", "name=fp16")
    assert scores["precision"] == "fp16" and math.isfinite(scores["bleu"])


def test_a_launch_says_first_what_it_trains_and_that_no_gpu_was_found(tmp_path):
    """`python train.py position=learned` (no experiment=) would train the base model for
    100,000 steps: the first log line says so, before any data is read. Here the launch is
    then refused (an earlier run's records) and leaves the folder as it was."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text("{}\n")
    command = [sys.executable, "train.py", "position=learned", f"hydra.run.dir={run_dir}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "error: run directory" in done.stderr, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "training model=base (d_model 512, 6+6 layers, about 45.7M parameters" in lines[0]
    assert "position=learned for 100,000 steps on data=toy (100,000 generated pairs" in lines[0]
    assert lines[0].endswith("no experiment= given: configs/train.yaml's defaults"), lines
    if not torch.cuda.is_available():  # trainer.device=auto falls back to the CPU, and says so
        assert "[WARNING] - trainer.device=auto: no CUDA GPU found" in lines[1], lines
    assert [p.name for p in run_dir.iterdir()] == ["metrics.json"]

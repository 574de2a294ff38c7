"""Shared fixtures: compose the real Hydra configs, find ../shared/data, build tiny models."""

import runpy
import signal
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from common.configs import compose_config
from model.transformer import build_model

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "configs"
SHARED_DATA = ROOT.parent / "shared" / "data"
POSITION_CONFIGS = sorted((CONFIG_DIR / "position").glob("*.yaml"))


def default_sigint() -> None:
    """preexec_fn of a child sent SIGINT: Ctrl-C acts as from a terminal, even where this test
    run inherited SIGINT ignored (a shell's background job), which Python's children would keep."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def script_main(name: str):
    """The main() of scripts/<name>.py, loaded from its file (nothing imports from scripts/)."""
    return runpy.run_path(str(ROOT / "scripts" / f"{name}.py"))["main"]


def shared_data(name: str) -> Path:
    """A corpus folder under ../shared/data, or skip the test where it is absent."""
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"{path} is absent: this test needs the shared development corpora")
    return path


def tiny_model(position_yaml: Path, vocab_size: int = 40, **overrides) -> torch.nn.Module:
    """A 2+2-layer, d_model 32 Transformer with the position variant of one YAML file."""
    torch.manual_seed(0)
    model_cfg = OmegaConf.merge(
        OmegaConf.load(CONFIG_DIR / "model" / "tiny.yaml"),
        {"d_model": 32, "n_heads": 4, "d_ff": 64, "max_positions": 64, **overrides},
    )
    return build_model(model_cfg, OmegaConf.load(position_yaml), vocab_size)


@pytest.fixture(params=POSITION_CONFIGS, ids=[p.stem for p in POSITION_CONFIGS])
def position_yaml(request) -> Path:
    """Each configs/position/*.yaml in turn: a new variant is tested without editing tests."""
    return request.param


def tiny_run_overrides(run_dir: Path, cache_dir: Path, *extra: str) -> list[str]:
    """Overrides for a seconds-long real training run on a small toy corpus."""
    return [
        "experiment=quickstart",
        f"run_dir={run_dir}",
        f"cache_dir={cache_dir}",
        "data.corpus.train_size=3000",
        "data.vocab_size=400",
        "data.max_tokens=1024",
        "model.d_model=64",
        "model.d_ff=128",
        "trainer.effective_tokens=1024",
        "trainer.max_minutes=null",
        "trainer.num_threads=1",
        *extra,
    ]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One tokenizer/encoding cache for the whole test session."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, cache_dir) -> Path:
    """A run directory holding a tiny model trained for a few hundred steps on the toy corpus."""
    from training.launch import train

    run_dir = tmp_path_factory.mktemp("run")
    overrides = ["trainer.max_steps=240", "trainer.eval_every=120", "trainer.save_every_steps=40"]
    overrides.append("trainer.eval_bleu_sentences=20")
    train(compose_config(tiny_run_overrides(run_dir, cache_dir, *overrides)))
    return run_dir

"""Hydra configs: groups on --help, clear errors for unknown options, _self_ first, composition."""

import subprocess
import sys

import pytest
import yaml
from hydra.utils import instantiate

from tests.conftest import CONFIG_DIR, ROOT, compose_config

GROUPS = ["data", "experiment", "model", "optim", "position", "trainer"]


def run_train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_help_lists_the_config_groups():
    out = run_train("--help").stdout
    for group in GROUPS:
        assert f"{group}: " in out
    variants = ", ".join(sorted(p.stem for p in (CONFIG_DIR / "position").glob("*.yaml")))
    assert f"position: {variants}" in out


def test_evaluate_help_lists_its_keys_not_trains_groups():
    """evaluate.py refuses train.py's groups (position=, optim=, ...): its --help offers none."""
    done = subprocess.run(
        [sys.executable, "evaluate.py", "--help"], cwd=ROOT, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for group in GROUPS:
        assert f"{group}:" not in done.stdout and f"{group}=" not in done.stdout
    for key in ("run_dir: ???", "split: null", "beam: 4", "nbest: 1", "translate: false"):
        assert key in done.stdout


def test_unknown_position_fails_with_the_valid_options():
    result = run_train("position=nope")
    assert result.returncode != 0
    assert "position/nope" in result.stderr
    for option in ("sinusoidal", "learned", "rope", "alibi", "none"):
        assert option in result.stderr


@pytest.mark.parametrize(
    "path", sorted(CONFIG_DIR.rglob("*.yaml")), ids=lambda p: str(p.relative_to(CONFIG_DIR))
)
def test_every_defaults_list_puts_self_first(path):
    defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults")
    if defaults is not None:
        assert defaults[0] == "_self_", f"{path}: _self_ must come first in defaults"


@pytest.mark.parametrize(
    "experiment", sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))
)
def test_every_experiment_composes(experiment):
    cfg = compose_config([f"experiment={experiment}", "run_dir=unused"])
    assert cfg.model.d_model % cfg.model.n_heads == 0
    assert cfg.optim.betas == [0.9, 0.98] and cfg.optim.eps == 1e-9


def test_table3_base_is_the_paper_recipe():
    cfg = compose_config(["experiment=table3_base", "run_dir=unused"])
    assert cfg.data.corpus.path == "wmt/wmt14" and cfg.data.vocab_size == 37000
    assert (cfg.model.d_model, cfg.model.n_heads, cfg.model.d_ff, cfg.model.dropout) == (
        512,
        8,
        2048,
        0.1,
    )
    assert (cfg.optim.warmup, cfg.optim.label_smoothing, cfg.trainer.max_steps) == (
        4000,
        0.1,
        100000,
    )
    assert cfg.position._target_.endswith("SinusoidalPositionEncoding")
    learned = compose_config(["experiment=table3_base", "position=learned", "run_dir=unused"])
    assert learned.position._target_.endswith("LearnedPositionEncoding")


@pytest.mark.parametrize(
    "experiment", sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*multi30k*.yaml"))
)
def test_multi30k_experiments_load_from_the_hub_by_default(experiment):
    """No folder of our machines: the hub id, unless data.path names a local copy."""
    data = compose_config([f"experiment={experiment}", "run_dir=unused"]).data
    assert data.corpus._target_ == "data.corpus.load_multi30k"
    assert data.path == data.corpus.path == "bentrevett/multi30k"
    local = compose_config([f"experiment={experiment}", "data.path=/copy", "run_dir=unused"])
    assert local.data.corpus.path == "/copy"


def test_model_configs_build(position_yaml):
    cfg = compose_config(["model=tiny", f"position={position_yaml.stem}", "run_dir=unused"])
    model = instantiate(cfg.model, position=cfg.position, vocab_size=100)
    assert model.d_model == 128


def test_threads_compose_in_turn():
    """The study's --jobs N composes configs from N threads; Hydra's global instance is shared."""
    from concurrent.futures import ThreadPoolExecutor

    from common.configs import compose_config as compose_in_process

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(compose_in_process, [f"seed={i}"]) for i in range(32)]
        assert [f.result().seed for f in futures] == list(range(32))

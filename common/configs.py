"""The project's Hydra configs composed in-process, as `python train.py <overrides>` sees them."""

import threading
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
# Hydra's compose API keeps one global instance: threads compose in turn
_COMPOSING = threading.Lock()


def compose_config(overrides: list[str] = (), config_name: str = "train") -> DictConfig:
    """The config `python <config_name>.py <overrides>` would see (without Hydra's runtime keys)."""
    with _COMPOSING, initialize_config_dir(version_base="1.3", config_dir=str(CONFIG_DIR)):
        return compose(config_name, overrides=list(overrides))

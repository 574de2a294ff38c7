"""train.py's and evaluate.py's logic called in this process: the one place studies/ reaches them.

The study's training runs go through `train.py --multirun` as a command (studies/runner.py);
the extrapolation study trains here, and both studies score here, one evaluation after another.
"""

from omegaconf import DictConfig

from evaluate import evaluate  # integrator: re-point to evaluation.evaluate.evaluate
from train import train  # integrator: re-point to training.launch.train


def train_in_process(cfg: DictConfig) -> dict:
    """Train per a composed train config (run_dir set); the final metrics."""
    return train(cfg)


def evaluate_in_process(cfg: DictConfig) -> dict:
    """Translate and score per a composed evaluate config; the scores."""
    return evaluate(cfg)

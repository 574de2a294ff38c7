"""Train a Transformer the paper's way (§5): `python train.py [experiment=...] [position=...]`.

The work is training/launch.py's (`train(cfg)`); this entry point parses the config, exports the
SLURM task's ranks under the submitit launcher, and turns a signal into its exit status.
"""

import os
import sys

from common.errors import quiet_start, run_entry, started

quiet_start(__name__)  # Ctrl-C while the imports below load: one line, status 130

import hydra
from omegaconf import DictConfig

from common.errors import optional_module, report_user_errors
from runs.preemption import TrainingInterrupted
from training.launch import train


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
@report_user_errors
def main(cfg: DictConfig) -> None:
    """Command-line entry: train; a user error is one `error:` line (exit 1), a signal 128+N."""
    started()
    if os.environ.get("SUBMITIT_EXECUTOR") == "slurm" and "RANK" not in os.environ:
        # submitit deferred: an optional dependency (the slurm extra), needed only under SLURM
        helpers = optional_module("submitit.helpers", "slurm")
        # one SLURM task per GPU (configs/hydra/launcher/slurm.yaml): export torchrun's variables
        helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    try:
        train(cfg)
    except TrainingInterrupted as e:  # train() logged where and how to resume
        if os.environ.get("SUBMITIT_EXECUTOR"):
            raise  # a sweep job: the launcher reports it (SIGUSR2 requeued it already)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:  # Ctrl-C before the training loop: one line, no traceback
        print("interrupted before training started: no new checkpoint", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    run_entry(main, "configs/train.yaml and its groups (python train.py --help)")

"""A trained run read back: the checkpoint a name picks, and the model and tokenizer it describes.

Evaluation never depends on today's YAML: the model is rebuilt from the resolved config stored
in the checkpoint, and the tokenizer is the file the checkpoint names, checked by its sha256.
"""

from pathlib import Path

import torch
from omegaconf import OmegaConf

from data.tokenizer import PAD_ID, Tokenizer
from model.checkpoint import CheckpointError, average_checkpoints, load_checkpoint, step_checkpoints
from model.transformer import build_model


def load_run(run_dir: Path, checkpoint: str) -> tuple[dict, str]:
    """The checkpoint named by last | best | avg:N | <file>, and a short tag for file names.

    A <file> that does not exist as given is also looked for in <run_dir>/checkpoints.
    """
    run_dir = Path(run_dir)
    ckpt_dir = run_dir / "checkpoints"
    if not run_dir.is_dir():
        raise CheckpointError(
            f"run directory {run_dir} does not exist: pass run_dir=<a training run directory>"
        )
    if checkpoint in ("last", "best") or checkpoint.startswith("avg:"):
        if not ckpt_dir.is_dir():
            raise CheckpointError(
                f"{run_dir} has no checkpoints/ directory: is it a training run directory?"
            )
    if checkpoint.startswith("avg:"):
        n = int(checkpoint[4:]) if checkpoint[4:].isdigit() else 0
        if n < 1:
            raise CheckpointError(f"checkpoint={checkpoint}: pass avg:N with N a positive integer")
        paths = step_checkpoints(ckpt_dir)[-n:]
        if len(paths) < n:
            raise CheckpointError(
                f"checkpoint={checkpoint}: only {len(paths)} step checkpoints in {ckpt_dir}; "
                "pass a smaller N"
            )
        return _checked(average_checkpoints(paths), f"{checkpoint} in {ckpt_dir}"), f"avg{n}"
    if checkpoint in ("last", "best"):
        path = ckpt_dir / f"{checkpoint}.pt"
        return _checked(load_checkpoint(path), path), checkpoint
    path = Path(checkpoint)
    if not path.exists() and (ckpt_dir / checkpoint).is_file():
        path = ckpt_dir / checkpoint
    return _checked(load_checkpoint(path), path), path.stem


def _checked(state, source) -> dict:
    """state if it holds weights, config and tokenizer (what evaluation needs), else an error."""
    missing = [
        key
        for key in ("model", "config", "tokenizer")
        if not isinstance(state, dict) or key not in state
    ]
    if missing:
        raise CheckpointError(
            f"checkpoint {source} lacks {', '.join(missing)}: pass a checkpoint written by "
            "train.py or scripts/average_checkpoints.py"
        )
    return state


def rebuild_model(state: dict, device) -> tuple[torch.nn.Module, Tokenizer]:
    """The model and tokenizer described by a checkpoint's stored config."""
    config = OmegaConf.create(state["config"])
    tokenizer = Tokenizer(state["tokenizer"]["path"])
    if tokenizer.sha256 != state["tokenizer"]["sha256"]:
        raise CheckpointError(
            f"tokenizer {tokenizer.path} differs from the one this checkpoint was trained with "
            f"(sha256 {tokenizer.sha256[:12]} != {str(state['tokenizer']['sha256'])[:12]}): "
            "restore that tokenizer file or retrain"
        )
    model = build_model(config.model, config.position, tokenizer.vocab_size, PAD_ID)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise CheckpointError(
            "checkpoint weights do not fit the model its config describes "
            f"({str(e).strip().splitlines()[0]}): pass a checkpoint written by train.py"
        ) from e
    return model.to(device).eval(), tokenizer

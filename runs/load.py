"""A trained run read back: the checkpoint a name picks, and the model and tokenizer it describes.

Evaluation never depends on today's YAML: the model is rebuilt from the resolved config stored
in the checkpoint, and the tokenizer is the run folder's copy (or the file the checkpoint names),
checked by its sha256. checkpoint_record is what an evaluation notes of the checkpoint it scored.
"""

from pathlib import Path

import torch
from omegaconf import OmegaConf

from common.files import file_sha256
from data.tokenizer import PAD_ID, Tokenizer
from model.transformer import build_model
from runs.checkpoint import (
    RUN_TOKENIZER,
    STEP_FILE,
    CheckpointError,
    average_checkpoints,
    check_same_run,
    load_checkpoint,
    step_checkpoints,
)


def load_run(run_dir: Path, checkpoint: str) -> tuple[dict, str]:
    """The checkpoint named by last | best | avg:N | <file>, and a short tag for file names.

    A <file> that does not exist as given is also looked for in <run_dir>/checkpoints; one of
    another run (_identified), or named as training names files but outside the run's
    checkpoints/, is tagged <stem>-<its sha256's first 8 hex digits>. The state
    records own_checkpoint and file_sha256 (None for an average) for checkpoint_record.
    """
    run_dir = Path(run_dir)
    ckpt_dir = run_dir / "checkpoints"
    if not run_dir.is_dir():
        what = "is a file, not a folder" if run_dir.exists() else "does not exist"
        raise CheckpointError(
            f"run directory {run_dir} {what}: pass run_dir=<a training run directory>"
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
        state = _checked(average_checkpoints(paths), f"{checkpoint} in {ckpt_dir}")
        return {**state, "own_checkpoint": True, "file_sha256": None}, f"avg{n}"
    if checkpoint in ("last", "best"):
        path = ckpt_dir / f"{checkpoint}.pt"
        return _identified(_checked(load_checkpoint(path), path), path, ckpt_dir), checkpoint
    path = Path(checkpoint)
    if not path.exists() and (ckpt_dir / checkpoint).is_file():
        path = ckpt_dir / checkpoint
    state = _identified(_checked(load_checkpoint(path), path), path, ckpt_dir)
    inside = path.resolve().parent == ckpt_dir.resolve()
    training_name = path.name in ("last.pt", "best.pt") or STEP_FILE.search(path.name)
    if inside or (state["own_checkpoint"] and not training_name):
        return state, path.stem
    # another folder's file never takes the name of this run's own evaluation (last, best, ...)
    return state, f"{path.stem}-{state['file_sha256'][:8]}"


def _identified(state: dict, path: Path, ckpt_dir: Path) -> dict:
    """state with its file's sha256 and whether it holds the run's own weights (own_checkpoint).

    Own: a file in the run's checkpoints/, or one elsewhere (an average written out) trained
    with the tokenizer and every trajectory setting of the run's last.pt.
    """
    own = path.resolve().parent == ckpt_dir.resolve()
    if not own and (ckpt_dir / "last.pt").is_file():
        try:
            check_same_run(load_checkpoint(ckpt_dir / "last.pt"), ckpt_dir, state, path)
            own = True
        except CheckpointError:
            own = False
    return {**state, "own_checkpoint": own, "file_sha256": file_sha256(path)}


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


def run_tokenizer(state: dict, run_dir: str | Path | None = None) -> Tokenizer:
    """The tokenizer a checkpoint was trained with: the run folder's copy, else its stored path.

    The copy in <run_dir>/tokenizer/ makes a run folder self-contained (the shared cache can be
    deleted, the folder moved); a file whose sha256 differs from the checkpoint's is refused.
    """
    wanted = str(state["tokenizer"]["sha256"])
    places = [Path(state["tokenizer"]["path"])]
    if run_dir is not None:
        places.insert(0, Path(run_dir) / state["tokenizer"].get("run_file", RUN_TOKENIZER))
    for path in places:
        if path.is_file():
            tokenizer = Tokenizer(path)
            if tokenizer.sha256 != wanted:
                raise CheckpointError(
                    f"tokenizer {tokenizer.path} differs from the one this checkpoint was trained "
                    f"with (sha256 {tokenizer.sha256[:12]} != {wanted[:12]}): restore that "
                    "tokenizer file or retrain"
                )
            return tokenizer
    raise CheckpointError(
        f"the tokenizer this checkpoint was trained with (sha256 {wanted[:12]}) is in none of "
        f"{', '.join(map(str, places))}: restore {places[0]} or retrain"
    )


def rebuild_model(state: dict, device, run_dir=None) -> tuple[torch.nn.Module, Tokenizer]:
    """The model and tokenizer described by a checkpoint's stored config (see run_tokenizer)."""
    config = OmegaConf.create(state["config"])
    tokenizer = run_tokenizer(state, run_dir)
    model = build_model(config.model, config.position, tokenizer.vocab_size, PAD_ID)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise CheckpointError(
            "checkpoint weights do not fit the model its config describes "
            f"({str(e).strip().splitlines()[0]}): pass a checkpoint written by train.py"
        ) from e
    return model.to(device).eval(), tokenizer


def checkpoint_record(state: dict) -> dict:
    """What an evaluation records of the checkpoint it scored: its step, file(s) and origin.

    step is the training step the weights reached (for an average, its newest input's), so an
    evaluation older than its run's last step can be told apart.
    """
    steps = [s for s in state.get("averaged_steps") or [state.get("step")] if s is not None]
    config = state.get("config") or {}
    position = (state.get("choices") or {}).get("position")
    if position is None:  # checkpoints written before the choice was recorded: the class name
        position = str((config.get("position") or {}).get("_target_", "")).rsplit(".", 1)[-1]
    return {
        "step": max(steps) if steps else None,
        "checkpoint_file": state.get("averaged") or state.get("file"),
        # which weights: their file's sha256, whether they are the run's own, the seed they had
        "checkpoint_sha256": state.get("file_sha256"),
        "own_checkpoint": state.get("own_checkpoint"),
        "checkpoint_seed": config.get("seed"),
        "position": position,
        "tokenizer_sha256": state["tokenizer"]["sha256"],
        "data": config.get("data"),
    }

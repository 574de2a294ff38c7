"""Checkpoints: atomic writes, code-free loading, rotation and averaging.

A checkpoint is a dict of tensors and plain Python values (model and optimizer state, step,
RNG states, sampler state, the resolved config as a dict, the tokenizer's path and sha256), so
it loads with ``torch.load(weights_only=True)``: nothing in a checkpoint can run code.
"""

import os
import re
import tempfile
from pathlib import Path

import torch


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable or not what was asked for."""


def save_checkpoint(state: dict, path: str | Path) -> None:
    """Write state to path atomically: a temporary file, fsync, then rename over path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_checkpoint(path: str | Path) -> dict:
    """Load a checkpoint on the CPU without unpickling arbitrary objects."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist: train first or pick another")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated file, foreign pickle, ...
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {path} is unreadable or unsafe: {first_line}") from e


STEP_FILE = re.compile(r"step_(\d+)\.pt$")


def step_checkpoints(directory: str | Path) -> list[Path]:
    """The step_<n>.pt files in directory, oldest (lowest step) first."""
    directory = Path(directory)
    found = [
        (int(m.group(1)), p) for p in directory.glob("step_*.pt") if (m := STEP_FILE.search(p.name))
    ]
    return [p for _, p in sorted(found)]


def prune_checkpoints(directory: str | Path, keep: int) -> None:
    """Delete all but the newest keep step_<n>.pt files."""
    for path in step_checkpoints(directory)[:-keep] if keep > 0 else []:
        path.unlink(missing_ok=True)


def average_checkpoints(paths: list[Path]) -> dict:
    """The first checkpoint with its model weights replaced by the mean over all of them."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    first = load_checkpoint(paths[0])
    total = {k: v.double() for k, v in first["model"].items()}
    for path in paths[1:]:
        for k, v in load_checkpoint(path)["model"].items():
            total[k] += v.double()
    first["model"] = {k: (v / len(paths)).to(first["model"][k].dtype) for k, v in total.items()}
    first["averaged"] = [str(p) for p in paths]
    return first


def load_latest_checkpoint(directory: str | Path, warn=print) -> dict | None:
    """The newest readable of last.pt and step_<n>.pt in directory, None if there are none.

    An unreadable file is skipped with a warning naming it; if files exist but none is
    readable, CheckpointError (nothing is overwritten).
    """
    directory = Path(directory)
    candidates = [directory / "last.pt", *reversed(step_checkpoints(directory))]
    candidates = [p for p in candidates if p.is_file()]
    for path in candidates:
        try:
            return load_checkpoint(path)
        except CheckpointError as e:
            warn(f"{e}; falling back to an older checkpoint")
    if candidates:
        raise CheckpointError(
            f"no readable checkpoint in {directory}: move the directory away to start afresh"
        )
    return None

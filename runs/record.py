"""A run's own record of how it was trained: one entry per launch (segment) in segments.json.

Hydra's `.hydra/overrides.yaml` holds the latest launch only; `<run_dir>/segments.json` keeps
every segment: when and where it ran (host and hardware), which code (its git commit), its
command-line overrides, the settings it changed from the checkpoint it resumed (only those that
leave the training as it was), the steps it covered and how it ended. Written atomically by the
process holding the run's lock.
"""

import json
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

from omegaconf import OmegaConf

from common.errors import UserError
from common.files import read_json, write_json

SEGMENTS_FILE = "segments.json"
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def code_version(root: Path = PROJECT_ROOT) -> str:
    """The git commit of the code in root, "+ uncommitted changes" if tracked files differ.

    "unrecorded (...)" where root is no git checkout or git is missing: a copy of the code
    without its history still trains, it just cannot say which code it is.
    """

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30
        )
        if done.returncode != 0:
            raise OSError((done.stderr.strip() or f"git {args[0]} failed").splitlines()[0])
        return done.stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError) as e:  # no git, no checkout, a hung git
        return f"unrecorded ({e})"
    if not changed:
        return commit
    return f"{commit} + uncommitted changes ({len(changed.splitlines())} files)"


def read_segments(run_dir: str | Path) -> list[dict]:
    """The segments recorded in run_dir (none for a new run)."""
    path = Path(run_dir) / SEGMENTS_FILE
    if not path.is_file():
        return []
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON ({e.msg}): restore it or move it away") from e
    if not isinstance(record, dict) or not isinstance(record.get("segments"), list):
        raise UserError(f"{path} holds no list of segments: restore it or move it away")
    return record["segments"]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def start_segment(
    run_dir: str | Path,
    start_step: int,
    overrides: list[str] | None,
    changes: list[str],
    hardware: str | None = None,
    code: str | None = None,
) -> int:
    """Append the entry of the segment starting now; return its index."""
    segments = read_segments(run_dir)
    segments.append(
        {
            "segment": len(segments) + 1,
            "launch": uuid.uuid4().hex[:12],  # names this launch's events file (runs/events.py)
            "started": _now(),
            "ended": None,
            "host": socket.gethostname(),
            "hardware": hardware,
            "code": code,
            "pid": os.getpid(),
            "cwd": os.getcwd(),
            "overrides": overrides,
            "changed_settings": changes,
            "start_step": start_step,
            "end_step": None,
            "wall_seconds": None,
            "outcome": "running (or killed)",
        }
    )
    write_json(Path(run_dir) / SEGMENTS_FILE, {"segments": segments})
    return len(segments) - 1


def end_segment(
    run_dir: str | Path, index: int, end_step: int, wall_seconds: float, outcome: str
) -> None:
    """Complete segment index's entry: the step it reached, its time, how it ended."""
    segments = read_segments(run_dir)
    segments[index].update(
        ended=_now(), end_step=end_step, wall_seconds=round(wall_seconds, 1), outcome=outcome
    )
    write_json(Path(run_dir) / SEGMENTS_FILE, {"segments": segments})


def trained_config(run_dir: str | Path) -> dict:
    """A run's .hydra/config.yaml, resolved; run_dir (Hydra's output folder, which train.py keeps
    unresolved) is the folder the run is read from."""
    config = OmegaConf.load(Path(run_dir) / ".hydra" / "config.yaml")
    config.run_dir = str(run_dir)
    return OmegaConf.to_container(config, resolve=True)


def evaluations(run_dir: str | Path) -> list[dict]:
    """The run's evaluations (eval/<name>.json, as evaluate.py wrote them), by name."""
    return [read_json(path) for path in sorted((Path(run_dir) / "eval").glob("*.json"))]

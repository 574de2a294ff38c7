"""A run's own record of how it was trained: one entry per launch (segment) in segments.json.

Hydra's `.hydra/overrides.yaml` holds the latest launch only; `<run_dir>/segments.json` keeps
every segment: when and where it ran (host and hardware), which code (its git commit), its
command-line overrides, the settings it changed from the checkpoint it resumed (only those that
leave the training as it was), the steps it covered and how it ended, the name of its
TensorBoard events file and the step, content sha256 and weights sha256 of every checkpoint it
saved (recorded before the file is written). A file in checkpoints/ rewritten with other weights
or another step and a fresh checksum matches no such entry, nor does a second events file named
like the launch's (probe 9-21, 13-28, 8-22): the run's own files are those its record names.
Written atomically by the process holding the run's lock.
"""

import json
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

from common.errors import UserError
from common.files import file_sha256, write_json

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


def read_record(run_dir: str | Path) -> dict:
    """segments.json's content ({"segments": []} for a new run)."""
    path = Path(run_dir) / SEGMENTS_FILE
    if not path.is_file():
        return {"segments": []}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON ({e.msg}): restore it or move it away") from e
    if not isinstance(record, dict) or not isinstance(record.get("segments"), list):
        raise UserError(f"{path} holds no list of segments: restore it or move it away")
    for number, segment in enumerate(record["segments"], 1):
        if not well_formed(segment):
            raise UserError(
                f"{path}: segment {number} is not as a launch writes it (steps, checkpoints, "
                "events file): restore the file or move the run away"
            )
    return record


def well_formed(segment) -> bool:
    """Whether a segments.json entry has the types the readers rely on."""
    if not isinstance(segment, dict):
        return False
    steps = [segment.get("start_step", 0), segment.get("end_step")]
    entries = segment.get("checkpoints", [])
    return (
        all(step is None or type(step) is int for step in steps)
        and isinstance(segment.get("events_file") or "", str)
        and isinstance(segment.get("events_sha256") or "", str)
        and isinstance(entries, list)
        and all(
            isinstance(e, dict) and type(e.get("step")) is int
            and isinstance(e.get("sha256"), str) and isinstance(e.get("weights"), str)
            and isinstance(e.get("file", ""), str)
            for e in entries
        )
    )  # fmt: skip


def read_segments(run_dir: str | Path) -> list[dict]:
    """The segments recorded in run_dir (none for a new run)."""
    return read_record(run_dir)["segments"]


def read_run_id(run_dir: str | Path) -> str | None:
    """The run id its first launch recorded (None: none recorded, a run older than ids)."""
    return read_record(run_dir).get("run_id")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def start_segment(
    run_dir: str | Path,
    start_step: int,
    overrides: list[str] | None,
    changes: list[str],
    hardware: str | None = None,
    code: str | None = None,
    run_id: str | None = None,
) -> int:
    """Append the entry of the segment starting now; return its index. run_id: the run's
    identity from its content (runs.run.run_id): every launch of one run derives the same."""
    record = read_record(run_dir)
    segments = record["segments"]
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
            "events_file": None,  # record_events_file
            "checkpoints": [],  # record_checkpoint: {step, sha256, weights, file}
        }
    )
    run_id = run_id or record.get("run_id")
    write_json(Path(run_dir) / SEGMENTS_FILE, {"run_id": run_id, "segments": segments})
    return len(segments) - 1


def end_segment(
    run_dir: str | Path, index: int, end_step: int, wall_seconds: float, outcome: str
) -> None:
    """Complete segment index's entry: the step it reached, its time, how it ended, and the
    sha256 of its events file as it ends (runs/events.py: another file under its name is not
    its curve)."""
    record = read_record(run_dir)
    segment = record["segments"][index]
    segment.update(
        ended=_now(), end_step=end_step, wall_seconds=round(wall_seconds, 1), outcome=outcome
    )
    events = Path(run_dir) / "tensorboard" / str(segment.get("events_file"))
    if segment.get("events_file") and events.is_file():
        segment["events_sha256"] = file_sha256(events)
    write_json(Path(run_dir) / SEGMENTS_FILE, record)


def record_events_file(run_dir: str | Path, index: int, name: str) -> None:
    """Name segment index's TensorBoard events file (tensorboard/<name>), once it exists."""
    record = read_record(run_dir)
    record["segments"][index]["events_file"] = name
    write_json(Path(run_dir) / SEGMENTS_FILE, record)


def record_checkpoint(run_dir: str | Path, step: int, sha256: str, weights: str, file: str) -> None:
    """Add a checkpoint the running (last) segment is about to save: its step, its content's
    sha256 (runs.checkpoint.content_sha256), its weights' (weights_sha256) and its file name."""
    record = read_record(run_dir)
    if not record["segments"]:  # a checkpoint written outside a launch (tests, tools)
        return
    entry = {"step": step, "sha256": sha256, "weights": weights, "file": file}
    record["segments"][-1].setdefault("checkpoints", []).append(entry)
    write_json(Path(run_dir) / SEGMENTS_FILE, record)


def current_launches(segments: list[dict]) -> list[dict]:
    """The launches that make the run: from its last fresh start (a segment at step 0) on."""
    fresh = [i for i, s in enumerate(segments) if s.get("start_step") == 0]
    return segments[max(fresh, default=0) :]

"""A run's TensorBoard scalars read back: ``{tag: {step: value}}`` from ``<run>/tensorboard``.

training/launch.py writes them (train/* every log_every steps, dev/* at each dev evaluation),
each launch (segment) to an events file of its own named ``...segment-<n>-<launch id>``; a
resumed run appends another such file to the same folder, and a step logged twice (before a
kill and again after the resume) keeps its last-written value. Only the launches that make
the run are read: from its last fresh start (a segment starting at step 0) on, each by the file
name segments.json records for it. Events of a launch discarded by a fresh start, or left in the
folder by another run (under its own name or renamed like one of this run's), are not its curve.
"""

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

from common.files import file_sha256
from runs.record import SEGMENTS_FILE, current_launches, read_segments, record_events_file
from runs.run import RunFileError

SEGMENT_SUFFIX = ".segment-"  # a launch's events file ends .segment-<n>-<its launch id>


def launch_suffix(segment: dict) -> str:
    """The events file suffix of the launch segments.json records as segment."""
    return f"{SEGMENT_SUFFIX}{segment['segment']}-{segment['launch']}"


def record_launch_file(run_dir: Path, index: int, suffix: str) -> None:
    """Name in segments.json the events file the launch's writer has just made: a file made
    later with the same suffix (another run's, renamed: probe 8-22) is not the launch's."""
    made = sorted(Path(run_dir, "tensorboard").glob(f"events.out.tfevents.*{suffix}"))
    if len(made) == 1:  # the launch id is new: no other file can bear it yet
        record_events_file(run_dir, index, made[0].name)


def launch_files(run_dir: Path) -> list[Path]:
    """The events files of the launches that make the run (from its last fresh start on): the
    file each segment names in segments.json, else the one named with its launch id, and the
    unnamed files of launches written before files were named (every file of a run whose
    launches named none)."""
    files = sorted((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    if not any(SEGMENT_SUFFIX in path.name for path in files):
        return files
    kept = current_launches(read_segments(run_dir))
    for segment in kept:
        check_events_file(run_dir, segment)
    named = {s["events_file"] for s in kept if s.get("events_file")}
    ours = {launch_suffix(s) for s in kept if "launch" in s and not s.get("events_file")}
    older = any("launch" not in s for s in kept)  # a run resumed across the change
    return [
        path
        for path in files
        if path.name in named
        or any(path.name.endswith(suffix) for suffix in ours)
        or (older and SEGMENT_SUFFIX not in path.name)
    ]


def check_events_file(run_dir: Path, segment: dict) -> None:
    """RunFileError where the events file a launch's entry names is not the one it wrote: not
    named with its launch id, or changed since the launch ended (probe 8-2, 8-3)."""
    name, recorded = segment.get("events_file"), segment.get("events_sha256")
    if not name:
        return
    path = run_dir / "tensorboard" / name
    if not name.endswith(launch_suffix(segment)):
        raise RunFileError(
            f"{run_dir / SEGMENTS_FILE}: segment {segment['segment']} names {name}, which is "
            "not named for its launch: restore that record"
        )
    if recorded and path.is_file() and file_sha256(path) != recorded:
        raise RunFileError(
            f"{path} is not the events file its launch wrote (its sha256 differs from the one "
            f"{SEGMENTS_FILE} recorded when the launch ended): restore it, or remove it (the "
            "run's curve then lacks that launch)"
        )


def missing_launch_files(run_dir: Path) -> list[str]:
    """The events files the run's launches recorded in segments.json that are gone: its curve
    lacks those launches (said by its readers: probe 8-4, a curve silently empty)."""
    if not (Path(run_dir) / SEGMENTS_FILE).is_file():
        return []
    return [
        s["events_file"]
        for s in current_launches(read_segments(run_dir))
        if s.get("events_file") and not (Path(run_dir) / "tensorboard" / s["events_file"]).is_file()
    ]


def read_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """Every scalar tag of the run's launches, by step (last-written wins); {} without events."""
    events = []  # (wall time, tag, step, value)
    for path in launch_files(Path(run_dir)):
        accumulator = EventAccumulator(str(path), size_guidance={SCALARS: 0})  # 0: keep all
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            events += [(e.wall_time, tag, e.step, e.value) for e in accumulator.Scalars(tag)]
    scalars: dict[str, dict[int, float]] = {}
    for _, tag, step, value in sorted(events, key=lambda e: e[0]):
        scalars.setdefault(tag, {})[step] = value
    return scalars

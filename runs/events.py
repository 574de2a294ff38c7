"""A run's TensorBoard scalars read back: ``{tag: {step: value}}`` from ``<run>/tensorboard``.

training/launch.py writes them (train/* every log_every steps, dev/* at each dev evaluation),
each launch (segment) to an events file of its own named ``...segment-<n>-<launch id>``; a
resumed run appends another such file to the same folder, and a step logged twice (before a
kill and again after the resume) keeps its last-written value. Only the launches that make
the run are read: from its last fresh start (a segment starting at step 0) on. Events of a
launch discarded by a fresh start, or left in the folder by another run, are not its curve.
"""

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

from runs.record import read_segments

SEGMENT_SUFFIX = ".segment-"  # a launch's events file ends .segment-<n>-<its launch id>


def launch_suffix(segment: dict) -> str:
    """The events file suffix of the launch segments.json records as segment."""
    return f"{SEGMENT_SUFFIX}{segment['segment']}-{segment['launch']}"


def launch_files(run_dir: Path) -> list[Path]:
    """The events files of the launches that make the run: those segments.json names, from its
    last fresh start on, and the unnamed files of launches written before files were named
    (every file of a run whose launches named none)."""
    files = sorted((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    if not any(SEGMENT_SUFFIX in path.name for path in files):
        return files
    segments = read_segments(run_dir)
    fresh = [s["segment"] for s in segments if s.get("start_step") == 0]
    kept = [s for s in segments if s["segment"] >= max(fresh, default=1)]
    ours = {launch_suffix(s) for s in kept if "launch" in s}
    older = any("launch" not in s for s in kept)  # a run resumed across the change
    return [
        path
        for path in files
        if any(path.name.endswith(suffix) for suffix in ours)
        or (older and SEGMENT_SUFFIX not in path.name)
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

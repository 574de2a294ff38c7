"""A run's TensorBoard scalars read back: ``{tag: {step: value}}`` from ``<run>/tensorboard``.

training/launch.py writes them (train/* every log_every steps, dev/* at each dev evaluation);
a resumed run appends another events file to the same folder, and a step logged twice (before
a kill and again after the resume) keeps its last-written value.
"""

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator


def read_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """Every scalar tag of run_dir/tensorboard, by step (last-written wins); {} without events."""
    folder = run_dir / "tensorboard"
    if not folder.is_dir():
        return {}
    events = EventAccumulator(str(folder), size_guidance={SCALARS: 0})  # 0: keep every event
    events.Reload()
    return {
        tag: {e.step: e.value for e in sorted(events.Scalars(tag), key=lambda e: e.wall_time)}
        for tag in events.Tags()["scalars"]
    }

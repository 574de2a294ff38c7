"""A run's TensorBoard curve is its own launches': not another run's, not a discarded launch's."""

import json
import shutil

from runs.checkpoint import load_checkpoint, save_checkpoint
from runs.events import read_scalars
from tests.conftest import compose_config, tiny_run_overrides


def train_tiny(run_dir, cache_dir, steps: int, every: int) -> None:
    from training.launch import train

    extra = (f"trainer.max_steps={steps}", f"trainer.eval_every={every}")
    train(compose_config(tiny_run_overrides(run_dir, cache_dir, *extra)))


def test_events_another_run_left_in_the_folder_are_not_read(tmp_path, cache_dir):
    import pytest

    from runs.directory import EarlierRecordsError

    other, run = tmp_path / "other", tmp_path / "run"
    train_tiny(other, cache_dir, 8, 4)
    shutil.copytree(other / "tensorboard", run / "tensorboard")  # left there, then a new run
    with pytest.raises(EarlierRecordsError, match=r"\(tensorboard/\)"):  # refused: whose?
        train_tiny(run, cache_dir, 6, 3)
    shutil.rmtree(run / "tensorboard")
    train_tiny(run, cache_dir, 6, 3)
    shutil.copytree(other / "tensorboard", run / "tensorboard", dirs_exist_ok=True)  # after it
    assert sorted(read_scalars(run)["dev/ppl"]) == [3, 6]  # was [3, 4, 6, 8]
    assert sorted(read_scalars(other)["dev/ppl"]) == [4, 8]


def test_a_launch_discarded_by_a_fresh_start_is_not_read(tmp_path, cache_dir):
    run = tmp_path / "run"
    train_tiny(run, cache_dir, 8, 4)
    for name in ("metrics.json", "data.json"):  # as if killed before its first checkpoint
        (run / name).unlink(missing_ok=True)
    for folder in ("checkpoints", "eval"):
        shutil.rmtree(run / folder, ignore_errors=True)
    record = json.loads((run / "segments.json").read_text())
    record["segments"][0].update(end_step=None, outcome="running (or killed)")
    (run / "segments.json").write_text(json.dumps(record))
    train_tiny(run, cache_dir, 6, 3)  # afresh, with the same folder (documented)
    segments = json.loads((run / "segments.json").read_text())["segments"]
    assert [s["start_step"] for s in segments] == [0, 0]
    assert sorted(read_scalars(run)["dev/ppl"]) == [3, 6]  # was [3, 4, 6, 8]


def test_a_run_resumed_across_the_change_keeps_its_earlier_launchs_events(tmp_path, cache_dir):
    """Launches written before events files were named still count where segments.json lists
    them (a run begun before 2026-12-07 and resumed after)."""
    run = tmp_path / "run"
    train_tiny(run, cache_dir, 4, 2)
    record = json.loads((run / "segments.json").read_text())
    for key in ("launch", "events_file", "events_sha256", "checkpoints"):
        del record["segments"][0][key]  # as the first launch recorded it then
    (run / "segments.json").write_text(json.dumps(record))
    for path in (run / "checkpoints").glob("*.pt"):  # and wrote its checkpoints
        state = load_checkpoint(path)
        del state["file"], state["launch"]
        save_checkpoint(state, path)
    for path in (run / "tensorboard").glob("*.segment-*"):
        path.rename(path.with_name(path.name.split(".segment-")[0]))  # and named its file
    train_tiny(run, cache_dir, 8, 2)  # resumed from step 4
    assert sorted(read_scalars(run)["dev/ppl"]) == [2, 4, 6, 8]


def test_another_runs_events_renamed_as_this_launchs_are_not_read(tmp_path, cache_dir):
    """Third outside probe 8-22: a second file ending with this launch's suffix (another run's
    events, renamed) was read in place of the launch's own; segments.json names the file."""
    other, run = tmp_path / "other", tmp_path / "run"
    train_tiny(other, cache_dir, 8, 4)
    train_tiny(run, cache_dir, 4, 2)
    own = read_scalars(run)["dev/ppl"]
    (mine,) = (run / "tensorboard").iterdir()
    (theirs,) = (other / "tensorboard").iterdir()
    suffix = mine.name[mine.name.index(".segment-") :]
    shutil.copy(theirs, run / "tensorboard" / f"events.out.tfevents.1796657999.vm.99999.0{suffix}")
    assert sorted(read_scalars(run)["dev/ppl"]) == sorted(own) == [2, 4]  # was [2, 4, 8]


def test_another_runs_events_under_this_launchs_recorded_name_are_refused(tmp_path, cache_dir):
    """Probe 8-2: another run's events file copied over this launch's (its very name) became
    the run's curve; 8-3: the record edited to name another file."""
    import pytest

    from runs.run import RunFileError

    other, run = tmp_path / "other", tmp_path / "run"
    train_tiny(other, cache_dir, 8, 4)
    train_tiny(run, cache_dir, 4, 2)
    (mine,) = (run / "tensorboard").iterdir()
    (theirs,) = (other / "tensorboard").iterdir()
    shutil.copy(theirs, mine)
    with pytest.raises(RunFileError, match="is not the events file its launch wrote"):
        read_scalars(run)
    shutil.copy(theirs, run / "tensorboard" / theirs.name)
    record = json.loads((run / "segments.json").read_text())
    record["segments"][0]["events_file"] = theirs.name
    (run / "segments.json").write_text(json.dumps(record))
    with pytest.raises(RunFileError, match="which is not named for its launch"):
        read_scalars(run)


def test_a_launchs_events_file_removed_is_said_where_its_curve_is_read(tmp_path, cache_dir, caplog):
    """Probe 8-4: with the recorded events file removed, compare's curve was empty, unsaid."""
    from evaluation.compare import dev_ppl_curve
    from runs.events import missing_launch_files

    run = tmp_path / "run"
    train_tiny(run, cache_dir, 4, 2)
    assert missing_launch_files(run) == [] and [s for s, _ in dev_ppl_curve(run)] == [2, 4]
    assert "missing" not in caplog.text
    (events,) = (run / "tensorboard").glob("events.out.tfevents.*")
    events.unlink()
    assert missing_launch_files(run) == [events.name] and dev_ppl_curve(run) == []
    assert f"the events file its launch recorded ({events.name}) is missing" in caplog.text

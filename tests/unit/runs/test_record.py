"""runs/record.py: a run's segments.json names what each launch wrote (its checkpoints' steps and
content, its events file), so a file rewritten with a fresh checksum is not taken for the run's
own (third outside probe, 9-21 and 13-28; the events file: tests/unit/runs/test_events.py)."""

import json
import shutil

import pytest

from common.errors import UserError
from runs.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from runs.run import Run
from tests.conftest import compose_config, script_main, tiny_run_overrides


def train_tiny(run_dir, cache_dir, seed: int, steps: int = 4) -> Run:
    from training.launch import train

    every = ("trainer.eval_every=2", "trainer.save_every_steps=2")
    overrides = (f"seed={seed}", f"trainer.max_steps={steps}", *every)
    train(compose_config(tiny_run_overrides(run_dir, cache_dir, *overrides)))
    return Run(run_dir)


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory, cache_dir) -> tuple[Run, Run]:
    """Two tiny runs that differ only in their seed."""
    folder = tmp_path_factory.mktemp("two_seeds")
    return tuple(train_tiny(folder / f"seed-{s}", cache_dir, s) for s in (1, 2))


def forged(run: Run, tmp_path, **changes) -> Run:
    """A copy of run whose last.pt was re-saved with changes (a valid checksum, by hand)."""
    copy = Run(tmp_path / "forged")
    shutil.copytree(run.path, copy.path)
    state = load_checkpoint(copy.checkpoint_file("last"))
    state.pop("file")
    save_checkpoint(state | changes, copy.checkpoint_file("last"))
    return copy


def test_each_launch_records_the_checkpoints_it_wrote(two_seeds):
    run, _ = two_seeds
    (segment,) = run.segments()
    assert sorted({entry["step"] for entry in segment["checkpoints"]}) == [2, 4]
    assert run.load("last")[0]["own_checkpoint"] is True
    assert run.load("step_2.pt")[0]["own_checkpoint"] is True


def test_another_seeds_weights_resaved_as_last_pt_are_refused(two_seeds, tmp_path):
    run, other = two_seeds
    weights = load_checkpoint(other.checkpoint_file("last"))["model"]
    copy = forged(run, tmp_path, model=weights)  # probe 9-21: was scored as the run's own
    with pytest.raises(CheckpointError, match="last.pt is not the last.pt this run wrote"):
        copy.load("last")


def test_a_step_rewritten_in_last_pt_is_refused(two_seeds, tmp_path):
    copy = forged(two_seeds[0], tmp_path, step=999)  # probe 13-28: was scored as step 999
    with pytest.raises(CheckpointError, match="records no step 999 checkpoint"):
        copy.load("last")


def test_a_resume_from_a_forged_last_pt_is_refused(two_seeds, tmp_path, cache_dir):
    weights = load_checkpoint(two_seeds[1].checkpoint_file("last"))["model"]
    copy = forged(two_seeds[0], tmp_path, model=weights)
    for path in copy.step_checkpoints():
        path.unlink()  # last.pt is what a resume reads
    before = copy.segments_file.read_bytes()
    with pytest.raises(CheckpointError, match="last.pt is not the last.pt this run wrote"):
        train_tiny(copy.path, cache_dir, 1, steps=6)
    assert copy.segments_file.read_bytes() == before  # refused before a segment began


def test_an_average_of_a_forged_step_file_is_refused(two_seeds, tmp_path):
    run, other = two_seeds
    copy = Run(tmp_path / "copy")
    shutil.copytree(run.path, copy.path)
    state = load_checkpoint(copy.checkpoint_file("step_2"))
    state.pop("file")
    state["model"] = load_checkpoint(other.checkpoint_file("step_2"))["model"]
    save_checkpoint(state, copy.checkpoint_file("step_2"))
    with pytest.raises(CheckpointError, match="step_2.pt is not the step_2.pt this run wrote"):
        copy.load("avg:2")
    average = script_main("average_checkpoints")
    for args in (["--run-dir", copy.path], copy.step_checkpoints()):  # the script, both ways
        with pytest.raises(SystemExit):
            average([*map(str, args), "--out", str(tmp_path / "avg.pt")])
        assert not (tmp_path / "avg.pt").exists()


def test_averaging_never_writes_over_an_existing_file(two_seeds, tmp_path, capsys):
    """Probe 1-3: average_checkpoints.py --out <a user's file> replaced it without a word."""
    users = tmp_path / "user.pt"
    users.write_text("user data\n")
    with pytest.raises(SystemExit):
        script_main("average_checkpoints")(["--run-dir", str(two_seeds[0].path), "--last", "2",
                                            "--out", str(users)])  # fmt: skip
    assert "user.pt exists: pass a new file name" in capsys.readouterr().err
    assert users.read_text() == "user data\n"


def test_files_outside_checkpoints_are_own_only_where_the_run_wrote_them(two_seeds, tmp_path):
    run, other = two_seeds
    shutil.copy(run.checkpoint_file("step_2"), tmp_path / "kept.pt")
    assert run.load(str(tmp_path / "kept.pt"))[0]["own_checkpoint"] is True
    state, tag = run.load(str(other.checkpoint_file("last")))
    assert state["own_checkpoint"] is False and tag.startswith("last-")


def test_a_run_whose_launches_recorded_no_checkpoints_is_read_as_before(two_seeds, tmp_path):
    copy = Run(tmp_path / "copy")
    shutil.copytree(two_seeds[0].path, copy.path)
    record = json.loads(copy.segments_file.read_text())
    del record["segments"][0]["checkpoints"]  # as a launch before the record wrote it
    copy.segments_file.write_text(json.dumps(record))
    with pytest.raises(CheckpointError, match="lists no checkpoint of it: that rec"):
        copy.load("last")  # its file names its launch: the record was edited (probe n-1)
    state = load_checkpoint(copy.checkpoint_file("last"))
    del state["file"], state["launch"]  # and as that launch wrote its files
    save_checkpoint(state, copy.checkpoint_file("last"))
    assert copy.written(load_checkpoint(copy.checkpoint_file("last"))) is None
    assert copy.load("last")[0]["own_checkpoint"] is True


def test_a_record_deleted_or_another_runs_is_named(two_seeds, tmp_path):
    """Probe n-2 (segments.json deleted: last.pt was own by its place), n-5 (another run's
    segments.json: the run's own last.pt was blamed)."""
    run, other = two_seeds
    copy = Run(tmp_path / "copy")
    shutil.copytree(run.path, copy.path)
    shutil.copy(other.segments_file, copy.segments_file)
    with pytest.raises(CheckpointError, match="written by launch .* does not list it"):
        copy.load("last")
    copy.segments_file.unlink()
    with pytest.raises(CheckpointError, match="written by launch .* does not list it"):
        copy.load("last")


def test_an_older_checkpoint_copied_over_last_or_best_is_refused(two_seeds, tmp_path):
    """Probe b-1 and b-3: step_2.pt copied over last.pt (a run that ended at step 4) or over
    best.pt was scored as the run's last or best: its content is recorded, as step_2.pt."""
    copy = Run(tmp_path / "copy")
    shutil.copytree(two_seeds[0].path, copy.path)
    for name in ("last", "best"):
        shutil.copy(copy.checkpoint_file("step_2"), copy.checkpoint_file(name))
        with pytest.raises(CheckpointError, match=f"{name}.pt is not the {name}.pt this run"):
            copy.load(name)
    assert copy.load("step_2.pt")[0]["own_checkpoint"] is True


@pytest.mark.parametrize(
    "change",
    [
        {"checkpoints": [{"step": "4", "sha256": "ab", "weights": "cd"}]},
        {"checkpoints": "all of them"},
        {"start_step": "0"},
        {"events_file": 7},
    ],
)
def test_an_edited_segment_entry_is_one_line_naming_the_file(two_seeds, tmp_path, change):
    copy = Run(tmp_path / "copy")
    shutil.copytree(two_seeds[0].path, copy.path)
    record = json.loads(copy.segments_file.read_text())
    record["segments"][0].update(change)
    copy.segments_file.write_text(json.dumps(record))
    with pytest.raises(UserError, match=r"segments.json: segment 1 is not as a launch writes it"):
        copy.load("last")

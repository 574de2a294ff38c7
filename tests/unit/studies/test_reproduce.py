"""studies/reproduce.py: a retrained run against its record, on folders TensorBoard really wrote."""

import json

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from studies.reproduce import ReproduceError, agreements, reproduce
from tests.conftest import script_main

STEPS = (100, 200, 300, 400)


def folder(path, loss=None, steps=STEPS, speed=1000.0, hyp=None, metrics=None):
    """A run folder with train/loss, train/tokens_per_s and dev/ppl written by TensorBoard."""
    loss = loss or {s: 5.0 / s**0.5 for s in steps}
    writer = SummaryWriter(path / "tensorboard")
    for step in steps:
        writer.add_scalar("train/loss", loss[step], step)
        writer.add_scalar("train/tokens_per_s", speed + step, step)
    writer.add_scalar("dev/ppl", 7.25, steps[-1])
    writer.close()
    if hyp is not None:
        (path / "eval").mkdir()
        (path / "eval" / "test-last-beam4.hyp").write_text("\n".join(hyp) + "\n")
    if metrics is not None:
        (path / "metrics.json").write_text(json.dumps(metrics))
    return path


def by_name(rows):
    return {r.name: r for r in rows}


def test_the_same_values_reproduce_and_the_machines_speed_is_left_out(tmp_path, capsys):
    """Equal scalars, translations and metrics: reproduced, though tokens/s differ."""
    hyp = ["ein Hund .", "zwei Katzen ."]
    metrics = {"steps": 400, "dev_ppl": 7.25, "wall_seconds": 10.0}
    record = folder(tmp_path / "record", hyp=hyp, metrics=metrics)
    run = folder(tmp_path / "run", speed=2000.0, hyp=hyp, metrics={**metrics, "wall_seconds": 9})
    assert reproduce(record, run)
    out = capsys.readouterr().out
    assert "reproduced: all 9 shared values equal to the last bit" in out
    rows = by_name(agreements(record, run))
    assert "train/tokens_per_s" not in rows and "metrics.json:wall_seconds" not in rows
    assert rows["eval/test-last-beam4.hyp"].shared == 2 and rows["metrics.json:dev_ppl"].equal == 1


def test_one_float32_step_apart_is_a_difference_at_that_step(tmp_path, capsys):
    """The smallest float32 change at step 300 is found, with its step and size."""
    loss = {s: 5.0 / s**0.5 for s in STEPS}
    moved = {**loss, 300: float(np.nextafter(np.float32(loss[300]), np.float32(9)))}
    record, run = folder(tmp_path / "record", loss), folder(tmp_path / "run", moved)
    assert not reproduce(record, run)
    row = by_name(agreements(record, run))["train/loss"]
    assert (row.shared, row.equal, row.first_difference) == (4, 3, 300)
    assert 0 < row.largest_difference < 1e-6
    assert "differs: train/loss (1 of 5 shared values)" in capsys.readouterr().out


def test_a_retrain_stopped_early_is_compared_on_the_steps_it_reached(tmp_path):
    """Steps 100-200 of a 400-step record; metrics.json of unequal step counts stays out."""
    record = folder(tmp_path / "record", metrics={"steps": 400, "dev_ppl": 7.25})
    run = folder(tmp_path / "run", steps=(100, 200), metrics={"steps": 200, "dev_ppl": 9.5})
    rows = by_name(agreements(record, run))
    loss = rows["train/loss"]
    assert (loss.shared, loss.equal, loss.record_only, loss.run_only) == (2, 2, 2, 0)
    assert rows["dev/ppl"].shared == 0 and rows["dev/ppl"].record_only == 1
    assert not any(name.startswith("metrics.json") for name in rows)
    assert reproduce(record, run)


def test_a_translation_that_differs_names_its_line(tmp_path):
    """The hypotheses compared line by line: the second line differs."""
    record = folder(tmp_path / "record", hyp=["ein Hund .", "zwei Katzen ."])
    run = folder(tmp_path / "run", hyp=["ein Hund .", "zwei Hunde ."])
    row = by_name(agreements(record, run))["eval/test-last-beam4.hyp"]
    assert (row.shared, row.equal, row.first_difference) == (2, 1, 2)


def test_folders_without_events_or_a_shared_step_are_one_line(tmp_path, capsys):
    """No TensorBoard folder names the flag; no step in common says what to wait for; the
    command line turns a difference into exit status 1."""
    record = folder(tmp_path / "record")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReproduceError, match=r"^--run .*empty: no TensorBoard scalars"):
        agreements(record, tmp_path / "empty")
    late = folder(tmp_path / "late", steps=(500,))
    with pytest.raises(ReproduceError, match="no logged step in common"):
        agreements(record, late)
    moved = folder(tmp_path / "moved", {s: 1.0 for s in STEPS})
    main = script_main("study")
    with pytest.raises(SystemExit) as stopped:
        main(["reproduce", "--record", str(record), "--run", str(moved)])
    assert stopped.value.code == 1 and "differs: train/loss" in capsys.readouterr().out
    assert main(["reproduce", "--record", str(record), "--run", str(record)]) is None

"""runs/checkpoint.py: atomic saves, code-free loading, rotation, averaging, fallback."""

import os
import pickle
import shlex
import shutil

import pytest
import torch

from runs.checkpoint import (
    CheckpointError,
    average_checkpoints,
    load_checkpoint,
    load_latest_checkpoint,
    prune_checkpoints,
    remove_temporary_files,
    save_checkpoint,
    step_checkpoints,
    weights_sha256,
)
from runs.run import load_run
from tests.conftest import script_main


def fake_state(step: int, seed: int | None = None) -> dict:
    """A checkpoint-shaped dict with random weights (float32 and a float64 buffer)."""
    generator = torch.Generator().manual_seed(step if seed is None else seed)
    return {
        "model": {
            "w": torch.randn(3, 4, generator=generator),
            "b": torch.randn(4, generator=generator, dtype=torch.float64),
        },
        "step": step,
        "config": {"model": {"d_model": 4}},
        "tokenizer": {"path": "spm.model", "sha256": "ab" * 32},
    }


class RunsCode:
    """Pickles as a call of os.system: unpickling it would run a shell command."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "checkpoints" / "last.pt"
    save_checkpoint(fake_state(1), path)
    save_checkpoint(fake_state(2), path)
    assert [p.name for p in path.parent.iterdir()] == ["last.pt"]
    assert load_checkpoint(path)["step"] == 2
    with pytest.raises((pickle.PicklingError, AttributeError)):  # a lambda cannot be pickled
        save_checkpoint({**fake_state(3), "bad": lambda: None}, path)
    assert [p.name for p in path.parent.iterdir()] == ["last.pt"]
    assert load_checkpoint(path)["step"] == 2  # the previous file is intact


def test_prune_keeps_the_newest_steps_by_number(tmp_path):
    for step in (1, 2, 10, 20, 100):
        save_checkpoint(fake_state(step), tmp_path / f"step_{step}.pt")
    save_checkpoint(fake_state(100), tmp_path / "last.pt")
    assert [p.name for p in step_checkpoints(tmp_path)] == [
        "step_1.pt",
        "step_2.pt",
        "step_10.pt",
        "step_20.pt",
        "step_100.pt",
    ]
    prune_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "step_100.pt", "step_20.pt"]


def test_average_is_the_elementwise_mean(tmp_path):
    paths = [tmp_path / f"step_{s}.pt" for s in (1, 2, 3)]
    for step, path in zip((1, 2, 3), paths, strict=True):
        save_checkpoint(fake_state(step), path)
    averaged = average_checkpoints(paths)
    states = [fake_state(s) for s in (1, 2, 3)]
    for name in ("w", "b"):
        expected = sum(s["model"][name].double() for s in states) / 3
        assert averaged["model"][name].dtype == states[0]["model"][name].dtype
        assert torch.allclose(averaged["model"][name].double(), expected, atol=1e-6)
    assert not torch.equal(averaged["model"]["w"], states[0]["model"]["w"])
    assert averaged["step"] == 1 and averaged["averaged"] == [str(p) for p in paths]
    with pytest.raises(CheckpointError, match="no checkpoints"):
        average_checkpoints([])


def test_averaging_counts_each_set_of_weights_once(tmp_path):
    """best.pt, last.pt and a copy hold one step's weights: refused, never counted twice."""
    ckpt_dir = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        save_checkpoint(fake_state(step), ckpt_dir / f"step_{step}.pt")
    save_checkpoint(fake_state(3), ckpt_dir / "last.pt")  # training's copy of the newest step
    save_checkpoint({**fake_state(3), "step": 2, "best": True}, ckpt_dir / "best.pt")
    paths = [ckpt_dir / name for name in ("best.pt", "last.pt", "step_1.pt", "step_3.pt")]
    with pytest.raises(CheckpointError) as refused:  # the glob checkpoints/*.pt: one line
        average_checkpoints(paths)
    message = str(refused.value)
    assert f"{paths[1]} holds the same weights as {paths[0]}" in message
    assert f"{paths[3]} holds the same weights as {paths[0]}" in message
    assert message.endswith(f"(leave out {paths[1]}, {paths[3]})") and "\n" not in message
    averaged = average_checkpoints(paths[2:])
    assert averaged["averaged_steps"] == [1, 3]
    assert averaged["averaged_sha256"] == [weights_sha256(fake_state(s)) for s in (1, 3)]
    save_checkpoint(fake_state(2, seed=3), ckpt_dir / "step_4.pt")  # step 3's weights again
    with pytest.raises(CheckpointError, match="step_4.pt holds the same weights as .*step_3.pt"):
        load_run(tmp_path, "avg:2")


def test_an_average_is_never_averaged_again(tmp_path, capsys):
    """An averaged input would weigh its steps unevenly (or twice): refused, naming its steps."""
    ckpt_dir = tmp_path / "checkpoints"
    steps = [ckpt_dir / f"step_{step}.pt" for step in (15, 20)]
    for step, path in zip((15, 20), steps, strict=True):
        save_checkpoint(fake_state(step), path)
    average = tmp_path / "avg1520.pt"
    save_checkpoint(average_checkpoints(steps), average)
    elsewhere = tmp_path / "other_run" / "checkpoints" / "avgx.pt"
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_bytes(average.read_bytes())
    for inputs, named in (([average, *steps], average), ([steps[1], elsewhere], elsewhere)):
        with pytest.raises(CheckpointError) as refused:
            average_checkpoints(inputs)
        message = str(refused.value)
        assert f"{named} is itself an average (of steps 15, 20)" in message and "\n" not in message
        assert message.endswith(f"averaged instead ({steps[0]}, {steps[1]})")
    out = tmp_path / "again.pt"
    with pytest.raises(SystemExit) as raised:  # the script: one error line, nothing written
        script_main("average_checkpoints")(["--out", str(out), str(average), *map(str, steps)])
    err = capsys.readouterr().err.strip().splitlines()
    assert raised.value.code == 1 and not out.exists()
    assert err == [f"error: {message.replace(str(elsewhere), str(average))}"], err
    shutil.copyfile(average, ckpt_dir / "step_25.pt")  # an average among the step files
    with pytest.raises(CheckpointError, match="step_25.pt is itself an average"):
        load_run(tmp_path, "avg:2")


def test_averaging_refuses_checkpoints_of_other_settings_or_tokenizers(tmp_path):
    config = {"position": {"_target_": "Sinusoidal"}, "trainer": {"max_steps": 10}}
    variants = {
        "base": config,
        "rope": {**config, "position": {"_target_": "RoPE"}},
        "tok": config,
        "up": {**config, "trainer": {"max_steps": 20}},  # a resume that raised max_steps
    }
    paths = {}
    for step, (name, variant) in enumerate(variants.items(), start=1):
        state = {**fake_state(step), "config": variant}
        state["tokenizer"] = {"path": "spm.model", "sha256": ("b" if name == "tok" else "a") * 64}
        paths[name] = tmp_path / f"{name}.pt"
        save_checkpoint(state, paths[name])
    with pytest.raises(CheckpointError, match="different settings .position._target_: "):
        average_checkpoints([paths["base"], paths["rope"]])
    with pytest.raises(CheckpointError, match="different tokenizers .sha256 aaaaaaaaaaaa vs bbbb"):
        average_checkpoints([paths["base"], paths["tok"]])
    assert average_checkpoints([paths["base"], paths["up"]])["averaged_steps"] == [1, 4]


def test_latest_falls_back_past_a_truncated_last_with_a_warning(tmp_path):
    save_checkpoint(fake_state(5), tmp_path / "step_5.pt")
    save_checkpoint(fake_state(10), tmp_path / "last.pt")
    data = (tmp_path / "last.pt").read_bytes()
    (tmp_path / "last.pt").write_bytes(data[: len(data) // 2])
    warnings = []
    state = load_latest_checkpoint(tmp_path, warn=warnings.append)
    assert state["step"] == 5
    assert len(warnings) == 1 and str(tmp_path / "last.pt") in warnings[0]


def test_latest_is_a_clear_error_when_nothing_is_readable(tmp_path):
    assert load_latest_checkpoint(tmp_path) is None  # a fresh run directory
    (tmp_path / "last.pt").write_bytes(b"not a checkpoint")
    (tmp_path / "step_3.pt").write_bytes(b"")
    warnings = []
    with pytest.raises(CheckpointError, match="no readable checkpoint in"):
        load_latest_checkpoint(tmp_path, warn=warnings.append)
    assert len(warnings) == 2
    assert (tmp_path / "last.pt").read_bytes() == b"not a checkpoint"  # nothing overwritten


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({**fake_state(1), "extra": RunsCode(f"touch {shlex.quote(str(marker))}")}, path)
    with pytest.raises(CheckpointError, match="unreadable or unsafe"):
        load_checkpoint(path)
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the file is really hostile: a plain load runs it
    assert marker.exists()


def test_a_flipped_bit_in_the_checksum_key_name_does_not_pass_a_damaged_file(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(fake_state(1) | {"num_threads": 1}, path)
    raw = path.read_bytes()
    assert raw.count(b"checksum") == 1
    path.write_bytes(raw.replace(b"checksum", b"checksul"))  # 'm' 0x6d -> 'l' 0x6c
    assert "checksul" in torch.load(path, weights_only=True)  # torch itself reads it
    with pytest.raises(CheckpointError, match=r"corrupt: it has no 'checksum' .*'checksul'"):
        load_checkpoint(path)


def test_a_checkpoint_without_the_checksum_loads_only_with_the_keys_older_ones_had(tmp_path):
    old = tmp_path / "old.pt"
    torch.save(fake_state(1) | {"rng": {}, "wall_seconds": 1.0, "averaged_steps": [1]}, old)
    assert load_checkpoint(old)["step"] == 1  # written before checkpoints had a checksum
    newer = tmp_path / "newer.pt"
    torch.save(fake_state(1) | {"corpus": {"pairs": 3}}, newer)  # a newer key, no checksum
    with pytest.raises(CheckpointError, match=r"newer.pt is corrupt.*'corpus'"):
        load_checkpoint(newer)


def test_a_killed_saves_temporary_file_is_removed_by_the_next_save(tmp_path):
    """Probe 14-8: a kill mid-save left `.avg.pt.*.tmp` beside --out for good; its name now
    says whose it is, and the next save of that file removes those whose writer is gone."""
    import os
    import socket

    host = socket.gethostname()
    dead = tmp_path / f".avg.pt.{host}@999999999.x1.tmp"  # no such process
    live = tmp_path / f".avg.pt.{host}@{os.getpid()}.x2.tmp"
    other = tmp_path / ".avg.pt.elsewhere@1.x3.tmp"
    for path in (dead, live, other):
        path.write_bytes(b"half a checkpoint")
    save_checkpoint(fake_state(1), tmp_path / "avg.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["avg.pt", live.name, other.name])


def test_a_resume_removes_only_the_temporaries_of_gone_writers(tmp_path):
    """Probe m-3: a resume deleted every `.*.pt.*.tmp` in checkpoints/, a live writer's too."""
    import os
    import socket

    host = socket.gethostname()
    dead = tmp_path / f".last.pt.{host}@999999999.x1.tmp"  # no such process
    live = tmp_path / f".avg.pt.{host}@{os.getpid()}.x2.tmp"  # an averaging writing there
    other = tmp_path / ".last.pt.elsewhere@1.x3.tmp"  # another machine's: not ours to judge
    older = tmp_path / ".step_10.pt.k2j4.tmp"  # a save from before names carried the writer
    mine = tmp_path / ".notes.pt.backup.tmp"  # a user's (probe r-26): no file training writes
    for path in (dead, live, other, older, mine):
        path.write_bytes(b"half a checkpoint")
    assert sorted(remove_temporary_files(tmp_path)) == sorted([dead, older])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, mine.name])

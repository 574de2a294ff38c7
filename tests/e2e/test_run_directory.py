"""Run directories (runs/directory.py): one process per directory, launches apart, folders that
hold from anywhere.

The lock: a second process refused naming the holder, a killed holder's lock taken over, folder
names under the file system's limit. Real command lines (`python train.py ...`), run from a
scratch working directory so their default `outputs/` folders land there: two launches in one
second get two folders, a live run's folder is refused. Self-contained run folders: the
tokenizer inside, corpus paths that hold from anywhere, evaluate.py with the cache deleted.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from data.corpus import prepare_data
from data.toy import main as write_toy_corpus
from runs.checkpoint import RUN_TOKENIZER, load_checkpoint
from runs.directory import (
    MAX_NAME_BYTES,
    RunDirectoryError,
    RunDirectoryInUseError,
    RunDirectoryLock,
    check_writable,
    folder_name,
)
from tests.conftest import ROOT, compose_config
from tests.e2e.test_reliability import quick_overrides
from training.launch import train

HOLD = """
import sys, time
from runs.directory import RunDirectoryLock
lock = RunDirectoryLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(600)
"""


def hold_lock(run_dir) -> subprocess.Popen:
    """A real second process that takes the lock on run_dir and keeps it until killed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_process_is_refused_naming_the_holder_pid(tmp_path):
    holder = hold_lock(tmp_path)
    try:
        with pytest.raises(RunDirectoryInUseError, match=f"in use by process {holder.pid} on "):
            RunDirectoryLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_process_killed_with_sigkill_is_taken_over(tmp_path, caplog):
    holder = hold_lock(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    assert holder.wait() == -signal.SIGKILL
    assert (tmp_path / ".lock").read_text().startswith(f"{holder.pid} on ")  # left behind
    with caplog.at_level("WARNING"), RunDirectoryLock(tmp_path):
        assert (tmp_path / ".lock").read_text().startswith(f"{os.getpid()} on ")
    assert f"left by process {holder.pid}" in caplog.text


def test_released_lock_is_free_and_one_process_cannot_take_it_twice(tmp_path):
    with RunDirectoryLock(tmp_path):
        with pytest.raises(RunDirectoryInUseError, match=str(os.getpid())):
            RunDirectoryLock(tmp_path).acquire()
    with RunDirectoryLock(tmp_path):  # released at the end of the first block
        pass
    assert (tmp_path / ".lock").read_text() == ""  # a clean end leaves no holder on record


def test_a_directory_under_a_file_is_one_error_naming_the_key(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(RunDirectoryError, match=r"run_dir=.*file/run: cannot write there"):
        check_writable(tmp_path / "file" / "run", "run_dir")
    with pytest.raises(RunDirectoryError, match="pass a writable directory as run_dir"):
        RunDirectoryLock(tmp_path / "file" / "run").acquire()


def test_folder_names_stay_under_the_limit_and_apart():
    assert folder_name("position-learned__seed-1") == "position-learned__seed-1"
    assert folder_name("data.path-../shared/m30k__seed-1") == "data.path-.._shared_m30k__seed-1"
    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"
    short_a, short_b = folder_name(long_a), folder_name(long_b)
    assert len(short_a.encode()) <= MAX_NAME_BYTES and short_a != short_b
    assert short_a.startswith("x" * 200) and folder_name(long_a) == short_a
    assert len(folder_name("ü" * 200).encode()) <= MAX_NAME_BYTES  # bytes, not characters


def test_check_free_names_a_live_holder_and_changes_nothing(tmp_path):
    RunDirectoryLock(tmp_path).check_free()  # no lock file yet: free
    holder = hold_lock(tmp_path)
    try:
        with pytest.raises(RunDirectoryInUseError, match=f"process {holder.pid} on "):
            RunDirectoryLock(tmp_path).check_free()
    finally:
        holder.kill()
        holder.wait()
    left = (tmp_path / ".lock").read_text()
    RunDirectoryLock(tmp_path).check_free()  # the killed holder's lock is free again
    assert (tmp_path / ".lock").read_text() == left == f"{holder.pid} on {os.uname().nodename}\n"


# --- launches from the command line ---------------------------------------------------------------


def launch(cwd: Path, overrides: list[str]) -> subprocess.Popen:
    """`python <ROOT>/train.py <overrides>` started in cwd."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *overrides],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_launches_in_the_same_second_get_two_folders(tmp_path, cache_dir):
    overrides = quick_overrides(cache_dir, "trainer.max_steps=2")
    prepare_data(compose_config(overrides).data, cache_dir, log=lambda _: None)  # warm the cache
    procs = {seed: launch(tmp_path, [*overrides, f"seed={seed}"]) for seed in (1, 2)}
    for proc in procs.values():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    runs = sorted(p.parent for p in tmp_path.glob("outputs/*/*/metrics.json"))
    assert len(runs) == 2, runs
    seeds = {json.loads((run / "metrics.json").read_text())["seed"]: run for run in runs}
    assert sorted(seeds) == [1, 2]
    for seed, proc in procs.items():
        assert seeds[seed].name.endswith(f"-{proc.pid}")  # <time>-<process id>
        steps = sorted(p.name for p in (seeds[seed] / "checkpoints").glob("step_*.pt"))
        assert steps == ["step_1.pt", "step_2.pt"]


def test_a_second_process_on_a_live_run_directory_is_refused_and_deletes_nothing(
    tmp_path, cache_dir
):
    run_dir = tmp_path / "live"
    in_flight = run_dir / "checkpoints" / ".last.pt.x1y2z3.tmp"  # the live run's save under way
    in_flight.parent.mkdir(parents=True)
    in_flight.write_bytes(b"half a checkpoint")
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text("- the live run's overrides\n")
    holder = hold_lock(run_dir)
    try:
        second = launch(tmp_path, [*quick_overrides(cache_dir), f"hydra.run.dir={run_dir}"])
        _, err = second.communicate(timeout=300)
    finally:
        holder.kill()
        holder.wait()
    lines = [line for line in err.splitlines() if line.strip()]
    assert second.returncode == 1 and "Traceback" not in err, err[-3000:]
    assert lines[-1].startswith(f"error: run directory {run_dir} is in use by process {holder.pid}")
    assert in_flight.read_bytes() == b"half a checkpoint"
    assert (run_dir / ".hydra" / "overrides.yaml").read_text() == "- the live run's overrides\n"
    assert not (run_dir / "metrics.json").exists() and not (run_dir / "data.json").exists()


def test_a_sweep_with_a_folder_name_past_255_bytes_runs(tmp_path, cache_dir):
    note = "0." + "0" * 297 + "1"  # a long value: its folder name would pass the file system's
    overrides = [*quick_overrides(cache_dir, "trainer.max_steps=1"), f"model.dropout={note}"]
    proc = launch(tmp_path, ["-m", *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    (job,) = [p.parent for p in (tmp_path / "sweep").glob("*/metrics.json")]
    assert len(job.name.encode()) <= 255 and job.name.startswith("+data.corpus.test_long_size-1__")
    assert f"model.dropout={float(note)!r}" in (job / ".hydra" / "overrides.yaml").read_text()


def test_a_sweep_naming_a_value_twice_is_one_line_and_makes_no_folder(tmp_path, cache_dir):
    """Third outside probe j-26: `seed=1,1` sent two jobs to one folder; the second died on the
    first's lock inside the launcher's traceback."""
    sweep = tmp_path / "sweep"
    overrides = [*quick_overrides(cache_dir), "seed=2,1,2", f"hydra.sweep.dir={sweep}"]
    proc = launch(tmp_path, ["-m", *overrides])
    _, err = proc.communicate(timeout=300)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 1 and "Traceback" not in err, err[-3000:]
    assert lines == [
        "error: seed=2,1,2: names one value more than once (2), and each value is a run of "
        "its own: pass each value once"
    ]
    assert not sweep.exists()


def test_an_unwritable_run_directory_is_one_line(tmp_path, cache_dir):
    (tmp_path / "file").write_text("")
    proc = launch(tmp_path, [*quick_overrides(cache_dir), f"hydra.run.dir={tmp_path}/file/run"])
    _, err = proc.communicate(timeout=300)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 1 and "Traceback" not in err, err[-3000:]
    assert lines == [
        f"error: hydra.run.dir={tmp_path}/file/run: cannot write there (Not a "
        "directory); pass a writable directory as hydra.run.dir"
    ]


# --- self-contained run folders -------------------------------------------------------------------


def relative_text_overrides(corpus: Path, cache: Path, run_dir: Path) -> list[str]:
    """A 2-step tiny run on plain-text files named relative to the working directory."""
    files = [
        f"data.files.{split}.{lang}={os.path.relpath(corpus / f'{split}.{lang}')}"
        for split in ("train", "validation", "test")
        for lang in ("en", "de")
    ]
    return [
        "data=text",
        *files,
        "model=tiny",
        "data.vocab_size=100",
        f"cache_dir={cache}",
        f"run_dir={run_dir}",
        "trainer.max_steps=2",
        "trainer.num_threads=1",
        "trainer.effective_tokens=4096",
        "trainer.save_every_minutes=null",
    ]


@pytest.fixture(scope="module")
def relative_run(tmp_path_factory) -> Path:
    """A run trained on a corpus named by relative paths, its cache deleted afterwards."""
    root = tmp_path_factory.mktemp("self_contained")
    write_toy_corpus(
        root / "corpus", train_size=200, validation_size=20, test_size=20, test_long_size=1
    )
    train(compose_config(relative_text_overrides(root / "corpus", root / "cache", root / "run")))
    shutil.rmtree(root / "cache")
    return root / "run"


def test_the_tokenizer_is_in_the_run_folder_and_every_checkpoint_names_it(relative_run):
    copy = relative_run / RUN_TOKENIZER
    for path in (relative_run / "checkpoints").glob("*.pt"):
        state = load_checkpoint(path)
        assert state["tokenizer"]["run_file"] == RUN_TOKENIZER
        assert Path(state["tokenizer"]["path"]) == copy.resolve()
        assert state["tokenizer"]["sha256"] == hashlib.sha256(copy.read_bytes()).hexdigest()
    files = load_checkpoint(relative_run / "checkpoints" / "last.pt")["config"]["data"]["files"]
    assert all(os.path.isabs(path) for langs in files.values() for path in langs.values())


def test_evaluate_works_with_the_cache_deleted_from_another_working_directory(
    relative_run, tmp_path
):
    moved = tmp_path / "moved_run"  # the folder moved, too: nothing may point into the old one
    shutil.copytree(relative_run, moved)
    original = relative_run / RUN_TOKENIZER
    original.rename(tmp_path / "away.model")
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    try:
        result = subprocess.run(
            [sys.executable, str(ROOT / "evaluate.py"), f"run_dir={moved}", "split=test", "beam=1"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        (tmp_path / "away.model").rename(original)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (moved / "eval" / "test-last-beam1.json").is_file()

"""model/run_directory.py: one process per run directory, a killed holder's lock freed, names."""

import os
import signal
import subprocess
import sys

import pytest

from runs.directory import (
    MAX_NAME_BYTES,
    RunDirectoryError,
    RunDirectoryInUseError,
    RunDirectoryLock,
    check_writable,
    folder_name,
)
from tests.conftest import ROOT

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

"""Tests for model/run_lock.py: one process per run directory; a killed holder's lock is freed."""

import os
import signal
import subprocess
import sys

import pytest

from model.run_lock import RunDirectoryInUseError, RunDirectoryLock
from tests.conftest import ROOT

HOLD = """
import sys, time
from model.run_lock import RunDirectoryLock
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

"""data/corpus.py's preparation lock: one process prepares a cache's data, the next one waits.

A real second process holds the lock until told to let go: this process says it waits (one log
line naming the lock file), then takes the lock once the holder released it; a free lock is
taken without a word, and again after its release.
"""

import os
import subprocess
import sys
import threading
import time

from data.corpus import preparation_lock
from tests.conftest import ROOT

IDENTITY = "ab" * 32
HOLD = f"""
import sys
from pathlib import Path
from data.corpus import preparation_lock
with preparation_lock(Path(sys.argv[1]), {IDENTITY!r}, print):
    print("locked", flush=True)
    sys.stdin.readline()  # hold until told to let go
"""


def test_a_second_process_waits_for_the_holder_then_prepares(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        said, held = [], threading.Event()

        def prepare() -> None:
            with preparation_lock(tmp_path, IDENTITY, said.append):
                held.set()

        waiter = threading.Thread(target=prepare, daemon=True)
        waiter.start()
        deadline = time.monotonic() + 60
        while not said and time.monotonic() < deadline:
            time.sleep(0.05)
        assert said == [
            "data: waiting for another process preparing the same data "
            f"({tmp_path / 'locks' / (IDENTITY[:32] + '.lock')})"
        ]
        assert not held.wait(0.5)  # still waiting while the holder holds
        holder.stdin.write("go\n")
        holder.stdin.flush()
        waiter.join(60)
        assert held.is_set()
    finally:
        holder.kill()
        holder.wait()


def test_a_free_lock_is_taken_without_a_word_and_again_after_release(tmp_path):
    said = []
    for _ in range(2):
        with preparation_lock(tmp_path, IDENTITY, said.append):
            pass
    assert said == []
    assert (tmp_path / "locks" / f"{IDENTITY[:32]}.lock").is_file()  # the file stays

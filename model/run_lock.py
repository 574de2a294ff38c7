"""One training process per run directory: an exclusive lock on `<run_dir>/.lock`.

The lock is the kernel's (`fcntl.flock`), so it ends with its holder whatever the way it ends:
a run killed with SIGKILL leaves the file behind but not the lock, and the next run takes it
over. The file holds the holder's PID and host, so a refused process can name it.
"""

import fcntl
import logging
import os
import socket
from pathlib import Path

from data.errors import UserError

LOCK_FILE = ".lock"

log = logging.getLogger(__name__)


class RunDirectoryInUseError(UserError):
    """Another live process trains in this run directory."""


class RunDirectoryLock:
    """An exclusive lock on a run directory while one process trains in it (a context manager).

    Only the holder writes, resumes or cleans up in the directory; a second process refuses
    with one line naming the holder, before it reads or changes anything there.
    """

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._file = None

    def acquire(self) -> "RunDirectoryLock":
        """Take the lock, or raise RunDirectoryInUseError naming the process that holds it."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        file = open(self.path, "a+", encoding="utf-8")  # a+: the holder's PID stays readable
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            holder = file.read().strip() or "unknown"
            file.close()
            raise RunDirectoryInUseError(
                f"run directory {self.run_dir} is in use by process {holder}: wait for that "
                "run to end (or stop it), or pass another hydra.run.dir / run_dir"
            ) from None
        file.seek(0)
        previous = file.read().strip()
        if previous:  # a holder that ended without releasing: killed, or a crashed machine
            log.warning(f"{self.path}: taking over the lock left by process {previous}")
        file.seek(0)
        file.truncate()
        file.write(f"{os.getpid()} on {socket.gethostname()}\n")
        file.flush()
        self._file = file
        return self

    def release(self) -> None:
        """Give the lock up; the file stays (deleting it would race with a process opening it)."""
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()
            self._file.flush()
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self) -> "RunDirectoryLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

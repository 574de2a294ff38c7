"""A run's directory: one training process at a time (a lock), a name and a place that work.

- RunDirectoryLock: an exclusive lock on `<run_dir>/.lock`. The lock is the kernel's
  (`filelock`: flock on Unix, LockFileEx on Windows), so it ends with its holder whatever the
  way it ends: a run killed with SIGKILL leaves the file behind but not the lock, and the next
  run takes it over. The file holds the holder's PID and host, so a refused process can name it
  (on Windows the holder's lock keeps others from reading it: they say "unknown").
- folder_name: a sweep job's folder name (Hydra's override_dirname) kept under the file
  system's 255-byte limit.
- RunDirectoryCheck: a Hydra callback that reports a run or sweep directory that cannot be
  created, or a sweep that names one value twice (two jobs, one folder), as one `error:` line
  before Hydra tries (Hydra's own failure is a traceback).
- DeferredFileHandler: the run's log file (train.log), held in memory until the launch passes
  its checks (start_log_files), so a refused launch leaves the file as it was.
- earlier_records / discard_records: a run directory's records of an earlier run that has no
  checkpoint left (refused unless trainer.start_over=true, which deletes them).
"""

import hashlib
import logging
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from filelock import FileLock, Timeout
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob
from omegaconf import DictConfig

from common.errors import UserError
from runs.record import SEGMENTS_FILE, read_segments
from runs.run import DATA_FILE, EVALUATIONS, LOG_FILE, METRICS_FILE, TENSORBOARD

LOCK_FILE = ".lock"
# What an earlier run leaves in its directory besides checkpoints, and what start_over deletes.
EARLIER_FILES = (METRICS_FILE, SEGMENTS_FILE, DATA_FILE, LOG_FILE)
EARLIER_FOLDERS = (EVALUATIONS, TENSORBOARD, ".hydra")

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
        self._lock: FileLock | None = None
        self._fd: int | None = None  # the lock's own descriptor while held (filelock lends it)

    def _recorded(self) -> str:
        """The holder the lock file names ('' if none, or if it cannot be read)."""
        try:
            return self.path.read_text(encoding="utf-8").strip()
        except OSError:  # no file yet; on Windows, a byte range a live holder locked
            return ""

    def _lend(self, fd: int) -> None:
        """filelock's on_acquired: keep the locked descriptor, to write the holder through it."""
        self._fd = fd

    def _write(self, text: str) -> None:
        """Replace the lock file's text through the locked descriptor (Windows allows no other)."""
        os.ftruncate(self._fd, 0)
        os.lseek(self._fd, 0, os.SEEK_SET)
        os.write(self._fd, text.encode("utf-8"))

    def _take(self) -> str:
        """Take the lock without waiting and return the holder the file named before (or '').

        Read before taking: filelock releases before 4.3 empty the file once they hold it.
        """
        previous = self._recorded()
        # the file stays on release (deleting it would race with a process opening it)
        lock = FileLock(
            self.path, thread_local=False, preserve_lock_file=True, on_acquired=self._lend
        )
        try:
            lock.acquire(blocking=False)
        except Timeout:
            holder = self._recorded() or previous or "unknown"
            raise RunDirectoryInUseError(
                f"run directory {self.run_dir} is in use by process {holder}: wait for that "
                "run to end (or stop it), or pass another hydra.run.dir / run_dir"
            ) from None
        self._lock = lock
        return previous

    def _give_up(self) -> None:
        """Release the lock (the file stays)."""
        self._lock.release()
        self._lock, self._fd = None, None

    def check_free(self) -> None:
        """RunDirectoryInUseError if a live process holds the lock; changes nothing."""
        if self.path.is_file():
            previous = self._take()
            if self._recorded() != previous:  # emptied on taking: put the record back
                self._write(f"{previous}\n" if previous else "")
            self._give_up()

    def acquire(self) -> "RunDirectoryLock":
        """Take the lock, or raise RunDirectoryInUseError naming the process that holds it."""
        check_writable(self.run_dir, "run_dir")
        previous = self._take()
        if previous:  # a holder that ended without releasing: killed, or a crashed machine
            log.warning(f"{self.path}: taking over the lock left by process {previous}")
        self._write(f"{os.getpid()} on {socket.gethostname()}\n")
        return self

    def release(self) -> None:
        """Give the lock up, leaving the file empty: a clean end leaves no holder on record."""
        if self._lock is not None:
            self._write("")
            self._give_up()

    def __enter__(self) -> "RunDirectoryLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class RunDirectoryError(UserError):
    """A run or sweep directory that cannot be created or written."""


def check_writable(directory: str | Path, key: str) -> None:
    """Create directory (and parents) and write a file in it, or raise RunDirectoryError."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        raise RunDirectoryError(
            f"{key}={directory}: cannot write there ({e.strerror or e}); pass a writable "
            f"directory as {key}"
        ) from None


# Longest folder name most file systems take (ext4, xfs, btrfs, NTFS: 255 bytes).
MAX_NAME_BYTES = 255


def folder_name(name: str) -> str:
    """name as one folder: '/' as '_', and past MAX_NAME_BYTES its first 200 bytes, '__' and
    12 hex digits of its sha256.

    A config resolver for hydra.sweep.subdir: an override naming a path (data.path=a/b) would
    otherwise nest folders, and a long override list fails at mkdir. The full overrides stay in
    the job's .hydra/overrides.yaml.
    """
    name = name.replace(os.sep, "_")
    raw = name.encode("utf-8")
    if len(raw) <= MAX_NAME_BYTES:
        return name
    head = raw[:200].decode("utf-8", errors="ignore")
    return f"{head}__{hashlib.sha256(raw).hexdigest()[:12]}"


class RunDirectoryCheck:
    """A Hydra callback: the run (or sweep) directory must be writable and free before Hydra
    writes into it (its .hydra/ and log file).

    Hydra creates the directory itself and reports a failure as a traceback; this checks it
    first and exits with one `error:` line (status 1). A run directory a live training holds
    is refused here too, so a second launch does not even rewrite its .hydra/ files (ranks
    other than 0 of one launch share the directory: only the main process checks).
    configs/train.yaml installs it.
    """

    def _check(self, directory: str, key: str, free: bool = False, overrides=()) -> None:
        try:
            check_sweep_values(list(overrides))  # first: a refused sweep makes no folder
            check_writable(directory, key)
            main_process = os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) == "0"
            if free and main_process:
                RunDirectoryLock(directory).check_free()
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config.hydra.run.dir, "hydra.run.dir", free=True)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        sweep = config.hydra.sweep.dir
        self._check(sweep, "hydra.sweep.dir", overrides=config.hydra.overrides.task)

    def on_run_end(self, config: DictConfig, **kwargs) -> None:
        pass

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        pass

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        pass

    def on_job_end(self, config: DictConfig, job_return, **kwargs) -> None:
        pass


def check_sweep_values(overrides: list[str]) -> None:
    """UserError for a sweep override that names one value twice (`seed=1,1`, `seed=1,01`): its
    two jobs would share one folder, and the second die on the first's lock (probe j-26)."""
    for override in OverridesParser.create().parse_overrides(overrides):
        if not override.is_sweep_override() or isinstance(override.value(), Glob):
            continue
        values = list(override.sweep_iterator())
        keys = [  # by value: 1 and 1.0 are one setting (probe j-3)
            repr(float(v)) if isinstance(v, int | float) and not isinstance(v, bool) else str(v)
            for v in values
        ]
        pairs = zip(values, keys, strict=True)
        twice = list(dict.fromkeys(str(v) for v, k in pairs if keys.count(k) > 1))
        if twice:
            raise UserError(
                f"{override.input_line}: names one value more than once ({', '.join(twice)}), and "
                "each value is a run of its own: pass each value once"
            )


class DeferredFileHandler(logging.FileHandler):
    """A log file that is written only once the launch is accepted (start_log_files).

    Hydra's job logging installs it (configs/train.yaml) in place of a plain FileHandler; until
    started, records wait in memory, so a refused launch never touches its run's train.log.
    """

    def __init__(self, filename, mode: str = "a", encoding: str | None = None):
        super().__init__(filename, mode, encoding, delay=True)
        self.waiting: list[logging.LogRecord] | None = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.waiting is None:
            super().emit(record)
        else:
            self.waiting.append(record)

    def start(self) -> None:
        """Open the file and write what waited, then write records as they come."""
        waiting, self.waiting = self.waiting or [], None
        for record in waiting:
            super().emit(record)


def start_log_files() -> list[Path]:
    """Start every DeferredFileHandler of the root logger; return their files."""
    started = []
    for handler in logging.getLogger().handlers:
        if isinstance(handler, DeferredFileHandler):
            handler.start()
            started.append(Path(handler.baseFilename))
    return started


def log_file_paths() -> list[Path]:
    """The files of the root logger's DeferredFileHandlers (the run's train.log)."""
    handlers = logging.getLogger().handlers
    return [Path(h.baseFilename) for h in handlers if isinstance(h, DeferredFileHandler)]


class EarlierRecordsError(UserError):
    """A run directory holds an earlier run's records but no checkpoint to resume."""


def earlier_records(run_dir: str | Path) -> list[str]:
    """The records of an earlier run in run_dir (metrics.json, segments.json, eval/ files).

    segments.json counts unless every launch it lists started at step 0 and died before its
    end (killed before any checkpoint: it trained nothing that is left, so training afresh
    with the same command continues the record honestly). Where no launch is recorded, a
    train.log or TensorBoard events are another run's (copied or left there): they count.
    """
    run_dir = Path(run_dir)
    found = ["metrics.json"] if (run_dir / "metrics.json").is_file() else []
    segments = read_segments(run_dir)
    if any(s.get("start_step") != 0 or s.get("end_step") is not None for s in segments):
        found.append(SEGMENTS_FILE)
    if not segments and (run_dir / LOG_FILE).is_file() and (run_dir / LOG_FILE).stat().st_size:
        found.append(LOG_FILE)
    if not segments and any(p.is_file() for p in (run_dir / TENSORBOARD).rglob("*")):
        found.append(f"{TENSORBOARD}/")
    if any(p.is_file() for p in (run_dir / "eval").glob("*")):
        found.append("eval/")
    return found


def discard_records(run_dir: str | Path, log_files: list[Path]) -> None:
    """Delete an earlier run's records (EARLIER_FILES, EARLIER_FOLDERS and log_files) in run_dir."""
    run_dir = Path(run_dir)
    for name in EARLIER_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for name in EARLIER_FOLDERS:
        shutil.rmtree(run_dir / name, ignore_errors=True)
    for path in log_files:
        if path.parent.resolve() == run_dir.resolve():
            path.unlink(missing_ok=True)

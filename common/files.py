"""Text and JSON files a run writes (metrics, scores, translations), each written atomically,
and the JSON objects read back."""

import ctypes
import errno
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from common.errors import NO_SPACE, DataError, UserError, os_error_in


class FileWriteError(UserError):
    """Files that could not be written (disk full, no permission); nothing was replaced."""


def write_failure(error: BaseException, what: str, retry: str) -> FileWriteError | None:
    """One line for the OS error behind a failed write of what (None where there is none: a bug).

    retry says how to run the command again once the disk has room (or the folder is writable).
    """
    cause = os_error_in(error)
    if cause is None:
        return None
    fix = "free space on that disk" if cause.errno in NO_SPACE else "make that folder writable"
    return FileWriteError(f"{cause.strerror or cause} while writing {what}: {fix} and {retry}")


def current_umask() -> int:
    """This process's umask (read by setting it, then setting it back)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def new_file_mode() -> int:
    """The mode open() gives a new file under this process's umask (mkstemp's is 0600)."""
    return 0o666 & ~current_umask()


def new_folder_mode() -> int:
    """The mode mkdir() gives a new folder under this process's umask (mkdtemp's is 0700)."""
    return 0o777 & ~current_umask()


def missing_folders(path: Path) -> list[Path]:
    """The folders from path up that do not exist, outermost first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.insert(0, path)
        path = path.parent
    return missing


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove those of folders (outermost first) that are empty, innermost first."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:  # not empty (someone else's file) or gone: leave it
            pass


def temporary_copy(path: Path, text: str) -> Path:
    """A temporary file beside path holding text, with the mode any new file would get."""
    # the writer in the name: the next write clears a killed one's, never a live one's (r-20)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=writer_prefix(path), suffix=".tmp")
    try:
        os.fchmod(fd, new_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def write_texts(files: dict[Path, str]) -> None:
    """Write several text files, all or none: each to a temporary file, then all renamed.

    A failure before the renames (disk full, Ctrl-C) removes the temporary files and the
    folders this call made: the disk is as it was. Files get the mode any new file would
    (0644 under the usual umask), not mkstemp's 0600.
    """
    made = {f for path in files for f in missing_folders(Path(path).parent)}
    made = sorted(made, key=lambda folder: len(folder.parts))  # outermost first
    written: list[tuple[Path, Path]] = []
    try:
        for path, text in files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            written.append((temporary_copy(Path(path), text), Path(path)))
        for tmp, path in written:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in written:
            tmp.unlink(missing_ok=True)
        remove_empty_folders(made)
        raise


def write_text(path: str | Path, text: str) -> None:
    """Write text to path atomically (temporary file, then rename): never a half-written file."""
    write_texts({Path(path): text})


STAGING_SUFFIX = ".partial"  # a folder filled beside its out (staged_folder)


def writer_prefix(path: Path) -> str:
    """The name of a temporary file or folder for path up to its random part: its writer's host
    and process id in it, so whatever a kill left at any moment names its writer (probe 14-2:
    an owner file inside a staging folder could be gone at the swap; 14-8)."""
    return f".{path.name}.{socket.gethostname()}@{os.getpid()}."


def left_by_dead_writers(path: Path, suffix: str, unnamed: bool = False) -> list[Path]:
    """The temporaries of path (writer_prefix, then suffix) that a killed writer on this machine
    left: the process their name names is gone; another machine's, or a live writer's, stay.
    unnamed: also those named before names carried the writer (`.<name>.<random><suffix>`)."""
    end = re.escape(suffix)
    named = re.compile(rf"^\.{re.escape(path.name)}\.(?P<host>.+)@(?P<pid>\d+)\.[^.]+{end}$")
    older = re.compile(rf"^\.{re.escape(path.name)}\.[^.@]+{end}$")
    left = []
    for found in path.parent.glob(f".{glob.escape(path.name)}.*"):
        match = named.match(found.name)
        if match and match["host"] == socket.gethostname() and not process_alive(int(match["pid"])):
            left.append(found)
        elif unnamed and older.match(found.name):
            left.append(found)
    return left


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (signal 0 only asks)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True


@contextmanager
def staged_folder(out: Path, replace: bool = False) -> Iterator[Path]:
    """A temporary folder beside out to fill, renamed to out once the block completes.

    out must be missing or an empty folder, unless replace: then a full out is exchanged with
    the filled folder in one step (swap_folders) and the old contents removed. Whatever fails
    inside the block (disk full, Ctrl-C) removes the temporary folder and the parents this
    made: out stays as it was.
    """
    if out.is_symlink():  # swapped out as a link, then rmtree on it: a traceback (probe 1-11)
        raise UserError(
            f"{out} is a symbolic link: this command writes a folder of its own there; remove "
            "the link (its target is left as it is) or pass another folder"
        )
    if out.exists() and not out.is_dir():  # (probe 1-1: a raw rename error)
        raise UserError(f"{out} is a file: pass a folder (new, or one this command wrote)")
    made = missing_folders(out.parent)
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in left_by_dead_writers(out, STAGING_SUFFIX):
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(
        tempfile.mkdtemp(dir=out.parent, prefix=writer_prefix(out), suffix=STAGING_SUFFIX)
    )
    try:
        os.chmod(staging, new_folder_mode())
        yield staging
        if replace and out.is_dir() and any(out.iterdir()):
            swap_folders(staging, out)  # staging now holds the old contents
            shutil.rmtree(staging)  # (a kill: removed by the next write)
        else:
            os.replace(staging, out)  # over an empty folder too (rename(2))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        remove_empty_folders(made)
        raise


RENAME_EXCHANGE = 2  # renameat2(2)'s flag: swap two paths atomically (Linux 3.15+)


def swap_folders(a: Path, b: Path) -> None:
    """Exchange two folders in one step (renameat2 RENAME_EXCHANGE): never a moment without
    either. Where the system or file system cannot (not Linux, EINVAL), two renames: a kill
    between them leaves b missing and its old contents in a (a deviation from all-or-none
    there, said here)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        at_cwd = -100  # AT_FDCWD
        if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), RENAME_EXCHANGE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(code, os.strerror(code), str(b))
    parked = a.with_name(f"{a.name}.old")
    os.replace(b, parked)
    os.replace(a, b)
    os.replace(parked, a)


@contextmanager
def replaced_folder(out: Path, owned: Sequence[str] = ()) -> Iterator[Path]:
    """A copy of out (or a new folder) beside it to rewrite, swapped in for out as a whole once
    the block completes: a kill or an error inside leaves out as it was, never half old and
    half new. What the block does not rewrite stays (a note by hand), except the files matching
    the owned patterns, which the copy drops first (a figure the block no longer draws)."""
    out = Path(out)
    with staged_folder(out, replace=True) as staging:
        if out.is_dir():
            shutil.copytree(out, staging, dirs_exist_ok=True)
            for pattern in owned:
                for path in staging.glob(pattern):
                    path.unlink()
        yield staging


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, read a MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_json(path: str | Path, obj) -> None:
    """Write obj as indented JSON atomically (temporary file, then rename)."""
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def read_json(path: str | Path) -> dict:
    """The JSON object in path; invalid JSON or another type is one DataError naming the file."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"{path} is not valid JSON ({e.msg}, line {e.lineno})") from e
    if not isinstance(obj, dict):
        raise DataError(f"{path} does not hold a JSON object")
    return obj

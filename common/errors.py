"""The one error type a user can fix, and the wrapper every entry point reports it through."""

import errno
import functools
import importlib
import os
import re
import signal
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TypeVar

Entry = TypeVar("Entry", bound=Callable)


class UserError(Exception):
    """A problem the user can fix; entry points print it as one `error: ...` line, exit 1.

    Raise it (or a subclass) at the boundary where the bad input is first seen, with a message
    that names the key or file and says what to do. Anything else is a bug and keeps its
    traceback.
    """


class DataError(UserError):
    """Bad data or data configuration; the message is one line saying what to fix."""


class MissingDependencyError(UserError):
    """An optional dependency that is not installed; the message names the pip install."""


def optional_module(name: str, extra: str) -> ModuleType:
    """Import module name of pyproject's optional extra, or MissingDependencyError naming it."""
    top = name.split(".")[0]
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != top:  # the package is there but broken (or too old): keep the traceback
            raise
        raise MissingDependencyError(
            f"{top} is not installed (an optional dependency): pip install -e '.[{extra}]'"
        ) from None


# How a Rust library (safetensors, tokenizers) words the OS error behind a failed write
RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")
# The errnos of a full disk or an exhausted quota
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def os_error_in(error: BaseException | None) -> OSError | None:
    """The OSError in an exception's chain (torch.save wraps a failed write in a RuntimeError),
    or one rebuilt from a Rust library's "(os error N)" message; None if there is none."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError):
            return error
        if found := RUST_OS_ERROR.search(str(error)):
            number = int(found.group(1))
            return OSError(number, os.strerror(number))
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def first_line(error: BaseException) -> str:
    """The first non-empty line of an exception's message (its type's name if it has none)."""
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__


def is_user_error(error: BaseException) -> bool:
    """A UserError, or an OSError about a file the user named (it carries a filename)."""
    if isinstance(error, UserError):
        return True
    return isinstance(error, OSError) and (
        error.filename is not None or error.filename2 is not None
    )


def report_user_errors(entry: Entry) -> Entry:
    """Wrap an entry point: a user error becomes one `error: ...` line on stderr and exit 1.

    Only UserError and the OS errors of user paths are caught; any other exception (a bug)
    propagates with its traceback. HYDRA_FULL_ERROR=1 shows the traceback of user errors too.
    """

    @functools.wraps(entry)
    def run(*args, **kwargs):
        try:
            return entry(*args, **kwargs)
        except (UserError, OSError) as e:
            if not is_user_error(e) or os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            one_line = str(e).replace("\n", " ")
            print(f"error: {one_line}", file=sys.stderr)
            sys.exit(1)

    return run


def _interrupted_while_starting(signum, frame) -> None:
    """SIGINT handler while an entry point starts: one line on stderr, exit status 130."""
    print("interrupted while starting: nothing was done", file=sys.stderr, flush=True)
    # os._exit, not sys.exit: a SystemExit raised inside an import can be caught or leave a
    # non-daemon thread of a half-imported library holding the process; nothing is written yet
    os._exit(130)


def quiet_start(name: str) -> None:
    """For a script run as __main__: Ctrl-C while its imports load is one line, not a traceback.

    Call it before the heavy imports; the entry point calls started() once it begins its work.
    """
    if name == "__main__":
        signal.signal(signal.SIGINT, _interrupted_while_starting)


def started() -> None:
    """Give Ctrl-C back its KeyboardInterrupt (what quiet_start replaced), and Hydra its own
    error printing (what run_entry replaced while the config was composed)."""
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if _RAISING_WHILE_COMPOSING[0]:
        _RAISING_WHILE_COMPOSING[0] = False
        os.environ.pop("HYDRA_FULL_ERROR", None)  # the job's own errors: as Hydra prints them


# Whether run_entry set HYDRA_FULL_ERROR (a list: set by one function, cleared by another)
_RAISING_WHILE_COMPOSING = [False]


def run_entry(main: Callable[[], None], keys: str) -> None:
    """Run a @hydra.main entry point; a command line Hydra cannot compose (a key the config
    lacks, a group option that does not exist, an override it cannot parse) is one `error:`
    line naming where the keys are, exit 1, not Hydra's several lines (whose advice, append
    with `+`, leads to keys the code does not read and refuses). keys: where the keys are."""
    from hydra.errors import HydraException  # deferred: hydra loads after quiet_start() runs

    if "HYDRA_FULL_ERROR" not in os.environ:  # the user's own setting: Hydra's full error
        # Hydra raises, instead of printing, what fails before the job starts; started() unsets it
        os.environ["HYDRA_FULL_ERROR"] = "1"
        _RAISING_WHILE_COMPOSING[0] = True
    try:
        main()
    except HydraException as e:
        if not _RAISING_WHILE_COMPOSING[0]:
            raise  # the user's HYDRA_FULL_ERROR, or (not expected) raised after the job began
        print(f"error: {_composition_error(e)}; the keys: {keys}", file=sys.stderr)
        sys.exit(1)


def _composition_error(error: Exception) -> str:
    """Hydra's composition error in one line, without its advice to append the key with `+`."""
    if key := re.match(r"Could not override '([^']+)'", str(error)):
        cause = f" ({first_line(error.__cause__)})" if error.__cause__ is not None else ""
        return f"{key.group(1)}: not a key this command takes{cause}"
    # e.g. "In 'train': Could not find 'model/foo'\n\nAvailable options in 'model': ...": the
    # options, not the config search path Hydra lists after them
    message = str(error).split("Config search path")[0]
    return " ".join(message.split()).replace("Available options", "available options")
